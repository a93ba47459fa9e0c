// Commands of the Open OnDemand portal: home-create.
#include <unistd.h>

#include "cli/commands.h"
#include "common/log.h"
#include "roles/configure.h"
#include "roles/host/container.h"
#include "roles/ood/home.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"

namespace onehpc {

int CmdHomeCreate(const std::string& user, const std::string& home_base, const std::string& skel) {
  if (::geteuid() != 0) {
    log::Error("home-create must run as root (it creates a home owned by another user)");
    return kExitFailed;
  }
  if (home_base == "/home") {  // the real portal; --home-base is for tests
    LibmountMounts mounts;
    if (auto s = ood::CheckHomesMounted(mounts, home_base, host::InContainer(Files(""))); !s) {
      log::Error("home-create {}: {}", user, s.error().message);
      return ExitCodeFor(s.error().kind);
    }
  }
  auto request = ood::LookUpHomeUser(user, home_base, skel);
  if (!request) {
    log::Error("{}", request.error().message);
    return ExitCodeFor(request.error().kind);
  }
  auto outcome = ood::CreateHome(*request);
  if (!outcome) {
    log::Error("{}", outcome.error().message);
    return ExitCodeFor(outcome.error().kind);
  }
  return kExitOk;
}

}  // namespace onehpc
