// The scontrol/squeue calls: exact argv, SLURM_CONF, timeouts, the 22.05 semantics and 24.11's
// JSON (answers scripted from what the real lab printed).
#include "roles/slurm/slurm_client.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"
#include "tests/support/source_dir.h"

namespace onehpc::slurm {
namespace {

using fakes::Exit;

using testing_support::SourceDir;

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

// ---- JSON (Slurm 23.02 and later) or text (22.05) ------------------------------------------

const char kNoJson[] =
    "scontrol: unrecognized option '--json'\nTry \"scontrol --help\" for more information\n";
const char kJsonOneNode[] =
    R"({"nodes": [{"name": "n1", "address": "10.77.0.11", "hostname": "n1",
                   "state": ["IDLE", "DYNAMIC_NORM"], "reason": "", "features": ["one"]}],
        "errors": [], "warnings": []})";

TEST_F(SlurmClientTest, ReadsNodesAsJsonWhereScontrolHasIt) {
  runner_.On({"scontrol", "--json", "show", "nodes"}, Exit(0, kJsonOneNode));
  auto c = Client();
  auto nodes = c.ShowNodes();
  ASSERT_TRUE(nodes) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].addr, "10.77.0.11");
  EXPECT_EQ(c.reads_json(), true);
  EXPECT_EQ(runner_.Argvs(), (std::vector<std::string>{"scontrol --json show nodes"}));
  EXPECT_EQ(c.calls(), 1);
}

// Slurm 22.05: one refused --json per client, then the text only.
TEST_F(SlurmClientTest, Slurm2205ReadsTextAfterOneRefusal) {
  runner_.On({"scontrol", "--json"}, Exit(1, "", kNoJson));
  runner_.On({"scontrol", "-o", "show", "nodes"},
             Exit(0, "NodeName=n1 NodeAddr=10.77.0.11 State=IDLE+DYNAMIC_NORM\n"));
  runner_.On({"scontrol", "-o", "show", "node", "n1"},
             Exit(0, "NodeName=n1 NodeAddr=10.77.0.11 State=IDLE+DYNAMIC_NORM\n"));
  auto c = Client();
  EXPECT_EQ(c.reads_json(), std::nullopt);
  ASSERT_TRUE(c.ShowNodes());
  ASSERT_TRUE(c.ShowNode("n1"));
  auto again = c.ShowNodes();
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ((*again)[0].addr, "10.77.0.11");
  EXPECT_EQ(c.reads_json(), false);
  EXPECT_EQ(runner_.Argvs(),
            (std::vector<std::string>{"scontrol --json show nodes", "scontrol -o show nodes",
                                      "scontrol -o show node n1", "scontrol -o show nodes"}));
}

// 24.11: an unknown name is an empty list (exit 0); the node found is the one asked for.
TEST_F(SlurmClientTest, JsonShowNodeFoundAndNotFound) {
  runner_.On({"scontrol", "--json", "show", "node", "n1"}, Exit(0, kJsonOneNode));
  runner_.On(
      {"scontrol", "--json", "show", "node", "nosuch"},
      Exit(0, R"({"nodes": [], "errors": [], "warnings": [{"description": "No nodes to dump"}]})"));
  auto c = Client();
  auto n1 = c.ShowNode("n1");
  ASSERT_TRUE(n1 && n1->has_value());
  EXPECT_EQ((*n1)->name, "n1");
  auto gone = c.ShowNode("nosuch");
  ASSERT_TRUE(gone) << gone.error().message;
  EXPECT_FALSE(gone->has_value());
  EXPECT_EQ(c.calls(), 2);
}

// slurmctld down: 24.11 prints no document, only the error (seen in the VM: exit 1 after its
// MessageTimeout). That error is returned at once: the text would only wait as long again.
TEST_F(SlurmClientTest, ControllerDownIsReturnedWithoutASecondWait) {
  runner_.On(
      {"scontrol", "--json"},
      Exit(1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)\n"));
  auto c = Client();
  auto nodes = c.ShowNodes();
  ASSERT_FALSE(nodes);
  EXPECT_NE(nodes.error().message.find("Unable to contact slurm controller"), std::string::npos);
  EXPECT_EQ(c.calls(), 1);
}

// A scontrol without its data_parser plugin, or a document one-hpc cannot read, at the first
// listing: the text is read (logged). Once JSON was read, an unreadable document is an error.
TEST_F(SlurmClientTest, UnusableJsonFirstMeansTextLaterMeansAnError) {
  runner_.On({"scontrol", "--json"},
             Exit(1, "", "scontrol: error: plugin data_parser/v0.0.42 not found\n"));
  runner_.On({"scontrol", "-o", "show", "nodes"}, Exit(0, "NodeName=n1 State=IDLE\n"));
  auto no_plugin = Client();
  ASSERT_TRUE(no_plugin.ShowNodes());
  EXPECT_EQ(no_plugin.reads_json(), false);

  runner_.On({"scontrol", "--json"}, Exit(0, "{\"meta\": {}}"));
  auto odd = Client();
  ASSERT_TRUE(odd.ShowNodes());
  EXPECT_EQ(odd.reads_json(), false);

  runner_.On({"scontrol", "--json"}, Exit(0, kJsonOneNode));
  auto c = Client();
  ASSERT_TRUE(c.ShowNodes());
  runner_.On({"scontrol", "--json"}, Exit(0, "{\"meta\": {}}"));
  EXPECT_FALSE(c.ShowNodes());
  EXPECT_EQ(c.reads_json(), true);
}

// The stand-in's JSON (FakeSlurm, which the role tests use) has the shape of the real 24.11
// document for every member one-hpc reads: the same JSON types, the times as the same objects.
TEST_F(SlurmClientTest, TheFakesJsonHasTheRealDocumentsShape) {
  std::ifstream in(SourceDir() + "/tests/data/slurm/scontrol-24.11-show-nodes.json");
  ASSERT_TRUE(in.good());
  auto real = nlohmann::json::parse(in);
  fakes::FakeSlurm slurm;
  slurm.nodes["n1"].reason = "removed from OneFlow service";
  slurm.nodes["n1"].last_busy = "2026-11-29T16:00:00";
  auto fake = nlohmann::json::parse(slurm.JsonNodes({"n1"}));
  const auto& r = real["nodes"][1];
  const auto& f = fake["nodes"][0];
  for (const char* key : {"name", "address", "hostname", "state", "reason", "reason_changed_at",
                          "last_busy", "features", "gres"}) {
    ASSERT_TRUE(r.contains(key)) << key;
    ASSERT_TRUE(f.contains(key)) << key;
    EXPECT_EQ(std::string(r[key].type_name()), f[key].type_name()) << key;
    if (r[key].is_object()) {
      for (const auto& [k, v] : r[key].items()) {
        ASSERT_TRUE(f[key].contains(k)) << key << "." << k;
        EXPECT_EQ(std::string(v.type_name()), f[key][k].type_name()) << key << "." << k;
      }
    }
    if (r[key].is_array())
      EXPECT_EQ(std::string(r[key][0].type_name()), f[key][0].type_name()) << key;
  }
  for (const char* key : {"nodes", "errors", "warnings"}) EXPECT_TRUE(fake.contains(key)) << key;
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
