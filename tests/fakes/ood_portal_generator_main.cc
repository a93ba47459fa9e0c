// ood-portal-generator-standin ADDRESS DOCROOT < ood_portal.yml > the virtual host
// (tests/fakes/ood_portal_generator.h). The real-VM tests run it on the host with the portal
// VM's ood_portal.yml and install its output in the VM's Apache.
#include <iostream>
#include <sstream>

#include "tests/fakes/ood_portal_generator.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: ood-portal-generator-standin ADDRESS DOCROOT < ood_portal.yml\n";
    return 2;
  }
  try {
    std::stringstream in;
    in << std::cin.rdbuf();
    std::cout << onehpc::fakes::OodLoginVirtualHost(YAML::Load(in.str()), argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "ood-portal-generator-standin: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
