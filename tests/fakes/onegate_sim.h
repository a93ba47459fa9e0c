// OneGate simulator specs and client settings for tests (real HTTP on 127.0.0.1).
#ifndef ONEHPC_TESTS_FAKES_ONEGATE_SIM_H_
#define ONEHPC_TESTS_FAKES_ONEGATE_SIM_H_

#include <chrono>
#include <string>

#include "context/onegate.h"
#include "tests/simulator/onegate_simulator.h"

namespace onehpc::fakes {

/// Simulator specs without partial aggregate initialisation (-Wmissing-field-initializers).
inline sim::RoleSpec SimRole(const std::string& name, int cardinality) {
  sim::RoleSpec r;
  r.name = name;
  r.cardinality = cardinality;
  return r;
}
inline sim::NicSpec SimNic(const std::string& ip, const std::string& network,
                           const std::string& network_id = "1", const std::string& name = "") {
  sim::NicSpec n;
  n.name = name;
  n.ip = ip;
  n.network = network;
  n.network_id = network_id;
  return n;
}
inline sim::Fault SimFault(sim::FaultKind kind, int status = 500, const std::string& body = "",
                           std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
  sim::Fault f;
  f.kind = kind;
  f.path_prefix = "/service";
  f.status = status;
  f.body = body;
  f.delay = delay;
  return f;
}

/// A OneGate client for a simulator VM (real HTTP on 127.0.0.1, fake clock for its retries).
inline OneGateConfig SimConfig(const sim::OneGateSimulator& sim, const sim::VmHandle& vm) {
  OneGateConfig c;
  c.endpoint = sim.Endpoint();
  c.vmid = std::to_string(vm.id);
  c.token = vm.token;
  c.connect_timeout = Duration(500);
  c.request_timeout = Duration(400);
  c.retry.initial_delay = Duration(100);
  c.retry.max_delay = Duration(400);
  c.retry.max_attempts = 2;
  c.retry.deadline = Duration(5000);
  c.retry.jitter = 0.0;
  c.unauthorized_attempts = 1;
  c.malformed_retries = 0;
  return c;
}

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_ONEGATE_SIM_H_
