// The controller as a worker reads it from the service document.
#include "roles/slurm/join.h"

#include <gtest/gtest.h>

#include "common/base64.h"
#include "roles/names.h"

namespace onehpc {
namespace {

TEST(ControllerFromServiceTest, PicksTheReadyController) {
  ServiceInfo s;
  s.name = "svc";
  ServiceRole ctl{"controller", 2, 2, {}};
  ServiceNode stale;
  stale.vm_id = 1;
  stale.vm = VmInfo{};
  stale.vm->state = kVmStateActive;
  ServiceNode ready;
  ready.vm_id = 2;
  ready.vm = VmInfo{};
  ready.vm->state = kVmStateActive;
  ready.vm->user_template = {{"READY", "YES"},
                             {"SLURM_CONTROLLER_ADDR", "10.0.0.5"},
                             {"SLURM_CONTROLLER_HOST", "ctl"},
                             {"SLURM_KEY_SERVER_PUBKEY", Base64Encode(std::string(32, 'p'))},
                             {"SLURM_MUNGE_KEY_ID", std::string(32, 'a')}};
  ctl.nodes = {stale, ready};
  s.roles = {ctl};
  auto info = ControllerFromService(s, 99);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->vm_id, 2);
  EXPECT_EQ(info->key_server_public_key, std::string(32, 'p'));
  EXPECT_EQ(info->munge_key_id, std::string(32, 'a'));
  s.roles[0].nodes = {stale};
  auto waiting = ControllerFromService(s, 99);
  ASSERT_FALSE(waiting);
  EXPECT_NE(waiting.error().message.find("missing READY=YES"), std::string::npos);
  s.roles[0].nodes[0].vm->user_template = ready.vm->user_template;
  s.roles[0].nodes[0].vm->user_template["SLURM_CONTROLLER_ADDR"] = "ctl.example";
  auto bad = ControllerFromService(s, 99);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("is not an IPv4 address"), std::string::npos);
  s.roles[0].nodes[0].vm->user_template = ready.vm->user_template;
  s.roles[0].nodes[0].vm->user_template["SLURM_MUNGE_KEY_ID"] = "ABC";
  auto bad_id = ControllerFromService(s, 99);
  ASSERT_FALSE(bad_id);
  EXPECT_NE(bad_id.error().message.find("SLURM_MUNGE_KEY_ID='ABC' published by controller VM 1 "
                                        "is not 32 lower-case hex digits"),
            std::string::npos)
      << bad_id.error().message;
  // A controller of an earlier one-hpc (the key in clear, no key server) is waited for.
  s.roles[0].nodes[0].vm->user_template = {{"READY", "YES"},
                                           {"SLURM_CONTROLLER_ADDR", "10.0.0.5"},
                                           {"SLURM_CONTROLLER_HOST", "ctl"},
                                           {"SLURM_MUNGE_KEY_BASE64", "eHh4"}};
  auto old = ControllerFromService(s, 99);
  ASSERT_FALSE(old);
  EXPECT_NE(old.error().message.find("missing SLURM_KEY_SERVER_PUBKEY, SLURM_MUNGE_KEY_ID"),
            std::string::npos)
      << old.error().message;
  // Powered off, a controller may still show READY=YES: waited for, never joined.
  ready.vm->state = 8;  // POWEROFF
  s.roles[0].nodes = {ready};
  auto off = ControllerFromService(s, 99);
  ASSERT_FALSE(off);
  EXPECT_NE(off.error().message.find("VM 2 (not ACTIVE: state 8)"), std::string::npos)
      << off.error().message;
}

}  // namespace
}  // namespace onehpc
