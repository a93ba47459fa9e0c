// The scontrol/squeue calls: exact argv, SLURM_CONF, timeouts, and the 22.05 semantics
// (answers scripted from what the real lab printed).
#include "roles/slurm/slurm_client.h"

#include <gtest/gtest.h>

#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc::slurm {
namespace {

using fakes::Exit;

class SlurmClientTest : public ::testing::Test {
 protected:
  SlurmClient Client() {
    SlurmClientOptions o;
    o.slurm_conf = "/lab/etc/slurm.conf";
    o.timeout = Duration(7000);
    return SlurmClient(runner_, o);
  }
  fakes::FakeProcessRunner runner_;
};

TEST_F(SlurmClientTest, EveryCallHasTimeoutAndConf) {
  runner_.On({"scontrol", "ping"}, Exit(0, "Slurmctld(primary) at ctl is UP\n"));
  auto c = Client();
  EXPECT_TRUE(c.Ping().value_or(false));
  ASSERT_EQ(runner_.commands().size(), 1u);
  const Command& cmd = runner_.commands()[0];
  EXPECT_EQ(cmd.timeout, Duration(7000));
  ASSERT_EQ(cmd.env.size(), 1u);
  EXPECT_EQ(cmd.env[0].first, "SLURM_CONF");
  EXPECT_EQ(cmd.env[0].second, "/lab/etc/slurm.conf");
  runner_.On({"scontrol", "ping"}, Exit(1, "Slurmctld(primary) at ctl is DOWN\n"));
  EXPECT_FALSE(c.Ping().value_or(true));
  EXPECT_EQ(c.calls(), 2);
}

// sinfo prints a line per partition and state; the lines add up to the nodes slurmctld holds.
TEST_F(SlurmClientTest, NodeCountAddsSinfosLines) {
  runner_.On({"sinfo", "-h", "-a", "-o", "%D"}, Exit(0, "97\n2\n1\n"));
  auto c = Client();
  EXPECT_EQ(c.NodeCount().value_or(-1), 100);
  runner_.On({"sinfo", "-h", "-a", "-o", "%D"}, Exit(0, ""));
  EXPECT_EQ(c.NodeCount().value_or(-1), 0);
  runner_.On({"sinfo", "-h", "-a", "-o", "%D"}, Exit(0, "12 nodes\n"));
  EXPECT_FALSE(c.NodeCount());
  runner_.On({"sinfo", "-h", "-a", "-o", "%D"}, Exit(1, "", "slurm_load_partitions: Unable"));
  EXPECT_FALSE(c.NodeCount());
}

TEST_F(SlurmClientTest, TimeoutIsAnError) {
  ProcessResult hung = Exit(-1);
  hung.timed_out = true;
  hung.term_signal = 15;
  runner_.On({"scontrol"}, hung);
  auto c = Client();
  auto nodes = c.ShowNodes();
  ASSERT_FALSE(nodes);
  EXPECT_NE(nodes.error().message.find("timed out after 7000 ms"), std::string::npos);
}

TEST_F(SlurmClientTest, ShowNodeFoundAndNotFound) {
  runner_.On({"scontrol", "-o", "show", "node", "n1"},
             Exit(0, "NodeName=n1 NodeAddr=10.77.0.11 State=IDLE+DYNAMIC_NORM\n"));
  runner_.On({"scontrol", "-o", "show", "node", "nosuch"}, Exit(1, "Node nosuch not found\n"));
  auto c = Client();
  auto n1 = c.ShowNode("n1");
  ASSERT_TRUE(n1 && n1->has_value());
  EXPECT_EQ((*n1)->addr, "10.77.0.11");
  auto gone = c.ShowNode("nosuch");
  ASSERT_TRUE(gone) << gone.error().message;
  EXPECT_FALSE(gone->has_value());
  runner_.On({"scontrol", "-o", "show", "node", "n1"},
             Exit(1, "", "slurm_load_node error: Unable to contact slurm controller\n"));
  auto down = c.ShowNode("n1");
  ASSERT_FALSE(down);
  EXPECT_NE(down.error().message.find("Unable to contact"), std::string::npos);
  EXPECT_FALSE(c.ShowNode("n1,n2"));  // never a list
}

TEST_F(SlurmClientTest, DeleteSemantics) {
  auto c = Client();
  runner_.On({"scontrol", "delete"}, Exit(0));
  EXPECT_EQ(c.DeleteNode("n1").value(), NodeChange::kDone);
  EXPECT_EQ(runner_.Argvs().back(), "scontrol delete nodename=n1");
  // Trap 6 / 9: an unknown name means the node is already gone.
  runner_.On({"scontrol", "delete"},
             Exit(1, "",
                  "scontrol: error: failed to delete nodes nosuch\n"
                  "delete_node nodename=nosuch: Invalid node name specified\n"));
  EXPECT_EQ(c.DeleteNode("nosuch").value(), NodeChange::kAlreadyGone);
  // Trap 7: busy.
  runner_.On({"scontrol", "delete"}, Exit(1, "",
                                          "scontrol: error: failed to delete nodes n2\n"
                                          "delete_node nodename=n2: Requested nodes are busy\n"));
  auto busy = c.DeleteNode("n2");
  ASSERT_FALSE(busy);
  EXPECT_NE(busy.error().message.find("Requested nodes are busy"), std::string::npos);
  // Refuses lists before running anything.
  size_t before = runner_.commands().size();
  EXPECT_FALSE(c.DeleteNode("n2,nosuch"));
  EXPECT_EQ(runner_.commands().size(), before);
}

TEST_F(SlurmClientTest, DeleteVerifiedDoesNotTrustExitCodes) {
  auto c = Client();
  runner_.On({"scontrol", "delete"}, Exit(0));
  runner_.On({"scontrol", "-o", "show", "node"}, Exit(0, "NodeName=n1 State=IDLE+DYNAMIC_NORM\n"));
  auto lied = c.DeleteNodeVerified("n1");
  ASSERT_FALSE(lied);
  EXPECT_NE(lied.error().message.find("still registered"), std::string::npos);
  runner_.On({"scontrol", "-o", "show", "node"}, Exit(1, "Node n1 not found\n"));
  EXPECT_EQ(c.DeleteNodeVerified("n1").value(), NodeChange::kDone);
}

TEST_F(SlurmClientTest, StateChangesKeepTheReasonInOneArgument) {
  auto c = Client();
  EXPECT_TRUE(c.SetState("n1", NodeStateChange::kDrain, "removed from OneFlow service"));
  EXPECT_EQ(runner_.commands().back().argv,
            (std::vector<std::string>{"scontrol", "update", "nodename=n1", "state=DRAIN",
                                      "reason=removed from OneFlow service"}));
  EXPECT_TRUE(c.SetState("n1", NodeStateChange::kResume, ""));
  EXPECT_EQ(runner_.Argvs().back(), "scontrol update nodename=n1 state=RESUME");
  EXPECT_FALSE(c.SetState("n1", NodeStateChange::kDown, ""));  // DOWN needs a reason
  runner_.On({"scontrol", "update"},
             Exit(1, "", "slurm_update error: Invalid node name specified\n"));
  EXPECT_EQ(c.SetState("n9", NodeStateChange::kDown, "x").value(), NodeChange::kAlreadyGone);
  runner_.On({"scontrol", "update"}, Exit(0));
  EXPECT_TRUE(c.SetNodeAddr("n1", "10.0.0.7"));
  EXPECT_EQ(runner_.Argvs().back(), "scontrol update nodename=n1 nodeaddr=10.0.0.7");
}

TEST_F(SlurmClientTest, ActiveJobs) {
  runner_.On({"squeue"}, Exit(0, "12 n[1-2]\n13 n2\n"));
  auto c = Client();
  auto jobs = c.ActiveJobsByNode();
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->at("n2").size(), 2u);
  EXPECT_EQ(runner_.Argvs().back(), "squeue -h -a -t RUNNING,SUSPENDED,COMPLETING -o '%i %N'");
  runner_.On({"squeue"}, Exit(1, "", "squeue: error: Unable to contact slurm controller"));
  EXPECT_FALSE(c.ActiveJobsByNode());
}

}  // namespace
}  // namespace onehpc::slurm
