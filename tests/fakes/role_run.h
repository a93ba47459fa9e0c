// Everything a RoleEnv refers to, for one role run on a FakeMachine.
#ifndef ONEHPC_TESTS_FAKES_ROLE_RUN_H_
#define ONEHPC_TESTS_FAKES_ROLE_RUN_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "context/settings.h"
#include "roles/plan.h"
#include "roles/role.h"
#include "tests/fakes/machine.h"

namespace onehpc::fakes {

/// Everything a RoleEnv refers to, for one role run.
struct RoleRun {
  RoleRun(FakeMachine& m, const Role& role, ContextVars vars, OneGateClient* onegate,
          PlanMode mode = PlanMode::kApply, LineExchange* exchange = nullptr)
      : plan(mode) {
    context.vars = std::move(vars);
    auto resolved = Settings::Resolve(role.Settings(), context.vars);
    EXPECT_TRUE(resolved) << (resolved ? "" : resolved.error().message);
    if (resolved) settings = std::make_unique<Settings>(std::move(*resolved));
    SystemAdapters sys{m.runner, *m.files, m.systemd, block_devices,
                       mounts,   m.clock,  m.http,    exchange};
    env =
        std::make_unique<RoleEnv>(RoleEnv::From(context, *settings, onegate, sys, plan, &publish));
  }
  /// Plan lines "what [outcome]" for the actions that are not keeps.
  std::vector<std::string> Changes() const {
    std::vector<std::string> out;
    for (const auto& a : plan.actions()) {
      if (a.outcome != PlannedAction::Outcome::kKept) out.push_back(a.what);
    }
    return out;
  }
  LoadedContext context;
  std::unique_ptr<Settings> settings;
  Plan plan;
  std::vector<std::pair<std::string, std::string>> publish;
  FakeBlockDevices block_devices;
  FakeMounts mounts;
  std::unique_ptr<RoleEnv> env;
};

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_ROLE_RUN_H_
