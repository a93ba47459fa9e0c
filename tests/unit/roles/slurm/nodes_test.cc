// Parsing what Slurm prints (samples captured from the real lab: 22.05's text, 24.11's JSON),
// host lists, node names and strict base64.
#include "roles/slurm/nodes.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/base64.h"
#include "tests/support/source_dir.h"

namespace onehpc::slurm {
namespace {

// Captured from `scontrol -o show nodes` on Slurm 22.05.8 (Debian 12).
constexpr char kTwoNodes[] =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.50 "
    "AvailableFeatures=oneflow ActiveFeatures=oneflow Gres=(null) NodeAddr=10.77.0.11 "
    "NodeHostName=n1 Version=22.05.8 OS=Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 AllocMem=0 FreeMem=22390 Sockets=1 Boards=1 State=IDLE+DYNAMIC_NORM "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=main  "
    "BootTime=2026-11-29T16:02:16 SlurmdStartTime=2026-11-29T16:12:47 "
    "LastBusyTime=2026-11-29T16:12:47 CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s\n"
    "NodeName=n2 Arch=x86_64 CoresPerSocket=2  CPUAlloc=1 CPUEfctv=2 CPUTot=2 CPULoad=1.50 "
    "AvailableFeatures=one ActiveFeatures=one Gres=(null) NodeAddr=10.77.0.12 NodeHostName=n2 "
    "Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 "
    "State=MIXED+DRAIN+DYNAMIC_NORM ThreadsPerCore=1 Partitions=main  "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES=cpu=1 CapWatts=n/a "
    "Reason=removed from OneFlow service [root@2026-11-29T16:12:52]\n";

TEST(ParseShowNodesTest, RealOutput) {
  auto nodes = ParseShowNodes(kTwoNodes);
  ASSERT_TRUE(nodes) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 2u);
  const SlurmNode& n1 = (*nodes)[0];
  EXPECT_EQ(n1.name, "n1");
  EXPECT_EQ(n1.addr, "10.77.0.11");
  EXPECT_EQ(n1.hostname, "n1");
  EXPECT_EQ(n1.state, "IDLE+DYNAMIC_NORM");
  EXPECT_EQ(n1.BaseState(), "IDLE");
  EXPECT_FALSE(n1.IsDown());
  EXPECT_FALSE(n1.IsNotResponding());
  EXPECT_FALSE(n1.IsDrain());
  EXPECT_EQ(n1.reason, "");
  EXPECT_EQ(n1.fields.at("OS"), "Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0");
  EXPECT_EQ(n1.fields.at("CfgTRES"), "cpu=2,mem=1000M,billing=2");
  EXPECT_EQ(n1.fields.at("AllocTRES"), "");
  const SlurmNode& n2 = (*nodes)[1];
  EXPECT_EQ(n2.BaseState(), "MIXED");
  EXPECT_TRUE(n2.IsDrain());
  EXPECT_EQ(n2.reason, "removed from OneFlow service");
  EXPECT_EQ(n2.features, "one");
}

TEST(ParseShowNodesTest, States) {
  auto nodes = ParseShowNodes(
      "NodeName=a State=IDLE+DYNAMIC_NORM+NOT_RESPONDING\n"
      "NodeName=b State=DOWN+DYNAMIC_NORM+NOT_RESPONDING Reason=Not responding "
      "[slurm@2026-11-29T16:13:30]\n"
      "NodeName=c State=DOWN+DRAIN+DYNAMIC_NORM Reason=x [root@2026-01-01T00:00:00]\n"
      "NodeName=d State=ALLOCATED+DYNAMIC_NORM\n");
  ASSERT_TRUE(nodes);
  EXPECT_TRUE((*nodes)[0].IsNotResponding());
  EXPECT_FALSE((*nodes)[0].IsDown());
  EXPECT_TRUE((*nodes)[1].IsDown());
  EXPECT_TRUE((*nodes)[1].IsNotResponding());
  EXPECT_EQ((*nodes)[1].reason, "Not responding");
  EXPECT_TRUE((*nodes)[2].IsDown());
  EXPECT_TRUE((*nodes)[2].IsDrain());
  EXPECT_FALSE((*nodes)[3].IsDown());
  EXPECT_FALSE((*nodes)[3].HasFlag("DYNAMIC"));  // whole flags only
}

TEST(ParseShowNodesTest, NoNodesAndGarbage) {
  auto none = ParseShowNodes("No nodes in the system\n");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto empty = ParseShowNodes("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(ParseShowNodes("slurm_load_node error: Unable to contact slurm controller\n"));
}

TEST(ParseShowNodesTest, ReasonCannotFakeTheState) {
  // An admin's reason that looks like fields must not override the real State.
  auto nodes = ParseShowNodes(
      "NodeName=x State=DOWN+DYNAMIC_NORM Reason=see State=IDLE NodeName=y "
      "[root@2026-01-01T00:00:00]\n");
  ASSERT_TRUE(nodes);
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].name, "x");
  EXPECT_TRUE((*nodes)[0].IsDown());
}

// ---- Slurm 24.11's JSON (`scontrol --json show nodes`) ------------------------------------

using testing_support::SourceDir;

std::string Sample(const std::string& name) {
  std::ifstream in(SourceDir() + "/tests/data/slurm/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Captured in the VM smoke on Debian 13 (Slurm 24.11.5, data_parser v0.0.42): one idle worker,
// one the reconciler drained while its job ran and its VM was gone.
TEST(ParseShowNodesJsonTest, RealOutputOf2411) {
  auto nodes = ParseShowNodesJson(Sample("scontrol-24.11-show-nodes.json"));
  ASSERT_TRUE(nodes) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 2u);
  const SlurmNode& idle = (*nodes)[0];
  EXPECT_EQ(idle.name, "slurm-one-worker-101");
  EXPECT_EQ(idle.addr, "10.79.0.12");
  EXPECT_EQ(idle.hostname, "slurm-one-worker-101");
  EXPECT_EQ(idle.state, "IDLE+DYNAMIC_NORM");
  EXPECT_EQ(idle.BaseState(), "IDLE");
  EXPECT_FALSE(idle.IsDrain());
  EXPECT_EQ(idle.reason, "");
  EXPECT_FALSE(idle.reason_since);  // reason_changed_at 0: none
  EXPECT_EQ(idle.last_busy, 1796616163);
  EXPECT_EQ(idle.features, "one");
  EXPECT_EQ(idle.gres, "");
  EXPECT_TRUE(idle.fields.empty());
  const SlurmNode& drained = (*nodes)[1];
  EXPECT_EQ(drained.BaseState(), "MIXED");
  EXPECT_TRUE(drained.IsDrain());
  EXPECT_TRUE(drained.IsNotResponding());
  EXPECT_FALSE(drained.IsDown());
  EXPECT_EQ(drained.reason, "removed from OneFlow service");
  EXPECT_EQ(drained.reason_since, 1796616250);
}

// 24.11 answers a name it does not know with an empty list, exit 0 and a warning.
TEST(ParseShowNodesJsonTest, NotFoundIsAnEmptyList) {
  auto nodes = ParseShowNodesJson(Sample("scontrol-24.11-show-node-not-found.json"));
  ASSERT_TRUE(nodes) << nodes.error().message;
  EXPECT_TRUE(nodes->empty());
}

TEST(ParseShowNodesJsonTest, ReasonCannotFakeTheStateOrAField) {
  auto nodes = ParseShowNodesJson(
      R"({"nodes": [{"name": "n1", "state": ["DOWN", "DYNAMIC_NORM"],
                     "reason": "x State=IDLE NodeAddr=6.6.6.6",
                     "reason_changed_at": {"set": true, "infinite": false, "number": 1700000000},
                     "address": "10.0.0.5"}], "errors": []})");
  ASSERT_TRUE(nodes) << nodes.error().message;
  EXPECT_EQ((*nodes)[0].BaseState(), "DOWN");
  EXPECT_EQ((*nodes)[0].addr, "10.0.0.5");
  EXPECT_EQ((*nodes)[0].reason, "x State=IDLE NodeAddr=6.6.6.6");
  EXPECT_EQ((*nodes)[0].reason_since, 1700000000);
}

TEST(ParseShowNodesJsonTest, WhatIsNotANodeListIsAnError) {
  EXPECT_FALSE(ParseShowNodesJson(""));
  EXPECT_FALSE(ParseShowNodesJson("NodeName=n1 State=IDLE"));
  EXPECT_FALSE(ParseShowNodesJson("[]"));
  EXPECT_FALSE(ParseShowNodesJson(R"({"errors": []})"));
  EXPECT_FALSE(ParseShowNodesJson(R"({"nodes": [{"state": ["IDLE"]}]})"));
  auto err = ParseShowNodesJson(
      R"({"nodes": [], "errors": [{"description": "Unable to contact slurm controller"}]})");
  ASSERT_FALSE(err);
  EXPECT_NE(err.error().message.find("Unable to contact slurm controller"), std::string::npos);
}

TEST(ExpandHostlistTest, Forms) {
  auto e = [](const char* text) {
    auto r = ExpandHostlist(text);
    EXPECT_TRUE(r) << text << ": " << (r ? "" : r.error().message);
    return r ? *r : std::vector<std::string>{};
  };
  EXPECT_EQ(e("n1"), (std::vector<std::string>{"n1"}));
  EXPECT_EQ(e("n[1-3]"), (std::vector<std::string>{"n1", "n2", "n3"}));
  EXPECT_EQ(e("n[1-2,7],gpu"), (std::vector<std::string>{"n1", "n2", "n7", "gpu"}));
  EXPECT_EQ(e("n[08-10]"), (std::vector<std::string>{"n08", "n09", "n10"}));
  EXPECT_EQ(e("slurm-one-worker-[41-42]"),
            (std::vector<std::string>{"slurm-one-worker-41", "slurm-one-worker-42"}));
  EXPECT_EQ(e("r[1-2]n[1-2]"), (std::vector<std::string>{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(e("a[1]-ib"), (std::vector<std::string>{"a1-ib"}));
  EXPECT_EQ(e(""), (std::vector<std::string>{}));
  EXPECT_EQ(e("(null)"), (std::vector<std::string>{"(null)"}));
}

TEST(ExpandHostlistTest, Errors) {
  EXPECT_FALSE(ExpandHostlist("n[1-3"));
  EXPECT_FALSE(ExpandHostlist("n1-3]"));
  EXPECT_FALSE(ExpandHostlist("n[3-1]"));
  EXPECT_FALSE(ExpandHostlist("n[a-b]"));
  EXPECT_FALSE(ExpandHostlist("n[]"));
  EXPECT_FALSE(ExpandHostlist("n[1-100]", 50));
  EXPECT_FALSE(ExpandHostlist("a[1-10]b[1-10]", 50));
}

TEST(ParseSqueueTest, JobsPerNode) {
  auto jobs = ParseSqueueJobNodes("1 n[1-2]\n7 n2\n\n");
  ASSERT_TRUE(jobs) << jobs.error().message;
  EXPECT_EQ(jobs->at("n1"), (std::vector<std::string>{"1"}));
  EXPECT_EQ(jobs->at("n2"), (std::vector<std::string>{"1", "7"}));
  EXPECT_EQ(jobs->count("n3"), 0u);
  auto none = ParseSqueueJobNodes("");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(ParseSqueueJobNodes("3 n[1-\n"));
}

TEST(NodeNameTest, Validity) {
  EXPECT_TRUE(IsValidNodeName("slurm-one-worker-42"));
  EXPECT_TRUE(IsValidNodeName("n1.example_x"));
  EXPECT_FALSE(IsValidNodeName(""));
  EXPECT_FALSE(IsValidNodeName("n2,nosuch"));  // trap 6: a list
  EXPECT_FALSE(IsValidNodeName("n[1-2]"));
  EXPECT_FALSE(IsValidNodeName("-n"));
  EXPECT_FALSE(IsValidNodeName("a b"));
  EXPECT_FALSE(IsValidNodeName("a=b"));
  EXPECT_FALSE(IsValidNodeName(std::string(65, 'a')));
}

TEST(Base64Test, RoundTripAndStrictness) {
  for (std::string s : {std::string(), std::string("f"), std::string("fo"), std::string("foo"),
                        std::string("foob"), std::string("\0\xff\x10 bin", 7)}) {
    auto d = Base64DecodeStrict(Base64Encode(s));
    ASSERT_TRUE(d) << d.error().message;
    EXPECT_EQ(*d, s);
  }
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_FALSE(Base64DecodeStrict("Zm8"));         // no padding
  EXPECT_FALSE(Base64DecodeStrict("Zm9v\nYmFy"));  // whitespace
  EXPECT_FALSE(Base64DecodeStrict("Zm=v"));        // padding inside
  EXPECT_FALSE(Base64DecodeStrict("Zm9="));        // non-zero padding bits
  EXPECT_FALSE(Base64DecodeStrict("Zm-v"));        // url alphabet
  auto err = Base64DecodeStrict("c2VjcmV0!!!!");
  ASSERT_FALSE(err);
  EXPECT_EQ(err.error().message.find("c2VjcmV0"), std::string::npos);  // never echoes input
}

}  // namespace
}  // namespace onehpc::slurm
