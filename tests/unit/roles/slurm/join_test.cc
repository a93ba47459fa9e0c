// The controller as a worker reads it from its VM (GET /vms/<id>).
#include "roles/slurm/join.h"

#include <gtest/gtest.h>

#include "common/base64.h"
#include "roles/names.h"

namespace onehpc {
namespace {

TEST(ControllerFromVmTest, ReadsAReadyControllerAndNamesWhatIsMissing) {
  VmInfo vm;
  vm.id = 2;
  vm.state = kVmStateActive;
  vm.user_template = {{"READY", "YES"},
                      {"SLURM_CONTROLLER_ADDR", "10.0.0.5"},
                      {"SLURM_CONTROLLER_HOST", "ctl"},
                      {"SLURM_KEY_SERVER_PUBKEY", Base64Encode(std::string(32, 'p'))},
                      {"SLURM_MUNGE_KEY_ID", std::string(32, 'a')}};
  const auto ready = vm.user_template;
  auto info = ControllerFromVm(vm);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->vm_id, 2);
  EXPECT_EQ(info->addr, "10.0.0.5");
  EXPECT_EQ(info->key_server_public_key, std::string(32, 'p'));
  EXPECT_EQ(info->munge_key_id, std::string(32, 'a'));
  vm.user_template.erase("READY");
  auto waiting = ControllerFromVm(vm);
  ASSERT_FALSE(waiting);
  EXPECT_EQ(waiting.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(waiting.error().message, "2 (missing READY=YES)");
  vm.user_template = ready;
  vm.user_template["SLURM_CONTROLLER_ADDR"] = "ctl.example";
  auto bad = ControllerFromVm(vm);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, ErrorKind::kInvalidInput);
  EXPECT_NE(bad.error().message.find("is not an IPv4 address"), std::string::npos);
  vm.user_template = ready;
  vm.user_template["SLURM_MUNGE_KEY_ID"] = "ABC";
  auto bad_id = ControllerFromVm(vm);
  ASSERT_FALSE(bad_id);
  EXPECT_NE(bad_id.error().message.find("SLURM_MUNGE_KEY_ID='ABC' published by controller VM 2 "
                                        "is not 32 lower-case hex digits"),
            std::string::npos)
      << bad_id.error().message;
  // A controller of an earlier one-hpc (the key in clear, no key server) is waited for.
  vm.user_template = {{"READY", "YES"},
                      {"SLURM_CONTROLLER_ADDR", "10.0.0.5"},
                      {"SLURM_CONTROLLER_HOST", "ctl"},
                      {"SLURM_MUNGE_KEY_BASE64", "eHh4"}};
  auto old = ControllerFromVm(vm);
  ASSERT_FALSE(old);
  EXPECT_EQ(old.error().message, "2 (missing SLURM_KEY_SERVER_PUBKEY, SLURM_MUNGE_KEY_ID)");
  // Powered off, a controller may still show READY=YES: waited for, never joined.
  vm.user_template = ready;
  vm.state = 8;  // POWEROFF
  auto off = ControllerFromVm(vm);
  ASSERT_FALSE(off);
  EXPECT_EQ(off.error().message, "2 (not ACTIVE: state 8)");
}

}  // namespace
}  // namespace onehpc
