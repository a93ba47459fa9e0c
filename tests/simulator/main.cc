// onegate-sim: the OneGate/OneFlow simulator as a standalone program for the lab and
// benchmarks.
//   onegate-sim --listen ADDR:PORT [--operator-api] [--threads N]
// Prints the endpoint ("http://ADDR:PORT") on stdout once it accepts connections, then runs
// until SIGTERM or SIGINT. Services and VMs are created through the operator API (/_sim/...,
// see onegate_simulator.cc), which --operator-api turns on.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "tests/simulator/onegate_simulator.h"

namespace {

void Usage(std::ostream& out) {
  out << "usage: onegate-sim --listen ADDR:PORT [--operator-api] [--threads N]\n"
         "  --listen ADDR:PORT  address to serve on (PORT 0 = any free port);\n"
         "                      IPv6 as [ADDR]:PORT\n"
         "  --operator-api      serve the operator API under /_sim/\n"
         "  --threads N         HTTP worker threads (default 32; one per open connection)\n";
}

bool SplitHostPort(const std::string& text, std::string& host, int& port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) return false;
  host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_text = text.substr(colon + 1);
  if (port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5) {
    return false;
  }
  port = std::stoi(port_text);
  return !host.empty() && port <= 65535;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen;
  bool operator_api = false;
  int threads = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--listen" && i + 1 < argc) {
      listen = argv[++i];
    } else if (arg.rfind("--listen=", 0) == 0) {
      listen = arg.substr(9);
    } else if (arg == "--threads" && i + 1 < argc) {
      const std::string n = argv[++i];
      if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(n) < 2) {
        std::cerr << "onegate-sim: --threads needs a number >= 2, got '" << n << "'\n";
        return 2;
      }
      threads = std::stoi(n);
    } else if (arg == "--operator-api") {
      operator_api = true;
    } else if (arg == "--help" || arg == "-h") {
      Usage(std::cout);
      return 0;
    } else {
      std::cerr << "onegate-sim: unknown argument '" << arg << "'\n";
      Usage(std::cerr);
      return 2;
    }
  }
  std::string host;
  int port = 0;
  if (listen.empty() || !SplitHostPort(listen, host, port)) {
    std::cerr << "onegate-sim: --listen needs ADDR:PORT, got '" << listen << "'\n";
    Usage(std::cerr);
    return 2;
  }

  // Block the signals before any thread starts, then wait for them here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  onehpc::sim::OneGateSimulator sim;
  sim.EnableOperatorApi(operator_api);
  sim.SetWorkerThreads(threads);
  if (sim.Start(host, port) < 0) {
    std::cerr << "onegate-sim: cannot listen on " << listen << "\n";
    return 1;
  }
  std::cout << sim.Endpoint() << std::endl;

  int received = 0;
  sigwait(&signals, &received);
  sim.Stop();
  return 0;
}
