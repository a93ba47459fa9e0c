// Address parsing and the choice of a worker's address on the controller's network.
#include "roles/host/address.h"

#include <gtest/gtest.h>

namespace onehpc::host {
namespace {

VmNic Nic(std::string name, std::string ip, std::string network) {
  VmNic n;
  n.name = std::move(name);
  n.ip = std::move(ip);
  n.network = std::move(network);
  return n;
}

TEST(Ipv4Test, Parse) {
  EXPECT_EQ(ParseIpv4("10.0.0.1"), 0x0a000001u);
  EXPECT_EQ(ParseIpv4("255.255.255.255"), 0xffffffffu);
  EXPECT_FALSE(ParseIpv4("10.0.0"));
  EXPECT_FALSE(ParseIpv4("10.0.0.1.2"));
  EXPECT_FALSE(ParseIpv4("10.0.0.256"));
  EXPECT_FALSE(ParseIpv4("10.00.0.1"));
  EXPECT_FALSE(ParseIpv4("10.0.0.1 "));
  EXPECT_FALSE(ParseIpv4("fe80::1"));
  EXPECT_FALSE(ParseIpv4(""));
  EXPECT_EQ(ParseMask("255.255.255.0"), 0xffffff00u);
  EXPECT_EQ(ParseMask("24"), 0xffffff00u);
  EXPECT_EQ(ParseMask("0"), 0u);
  EXPECT_FALSE(ParseMask("255.0.255.0"));
  EXPECT_FALSE(ParseMask("33"));
}

TEST(ContextNicsTest, OnlyEthNIp) {
  ContextVars vars = {{"ETH1_IP", "10.1.0.2"},        {"ETH0_IP", "192.0.2.10"},
                      {"ETH0_MASK", "255.255.255.0"}, {"ETH0_IP6", "fe80::1"},
                      {"ETH0_ALIAS0_IP", "10.9.9.9"}, {"ETH2_IP", "bogus"}};
  auto nics = ContextNics(vars);
  ASSERT_EQ(nics.size(), 2u);
  EXPECT_EQ(nics[0].index, 0);
  EXPECT_EQ(nics[0].mask, "255.255.255.0");
  EXPECT_EQ(nics[1].ip, "10.1.0.2");
  EXPECT_EQ(ControllerAddress(vars).value_or("?"), "192.0.2.10");
  EXPECT_EQ(ControllerAddress({{"ETH3_IP", "10.3.0.1"}}).value_or("?"), "10.3.0.1");
  auto none = ControllerAddress({});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("ETH0_IP"), std::string::npos);
}

TEST(SelectWorkerAddressTest, ByNetworkNameNotFirstNic) {
  std::vector<VmNic> ctl = {Nic("NIC0", "10.0.0.5", "service"), Nic("NIC1", "192.0.2.5", "public")};
  std::vector<VmNic> own = {Nic("NIC0", "192.0.2.77", "public"),
                            Nic("NIC1", "10.0.0.77", "service")};
  auto choice = SelectWorkerAddress("10.0.0.5", ctl, own, {});
  ASSERT_TRUE(choice) << choice.error().message;
  EXPECT_EQ(choice->ip, "10.0.0.77");
  EXPECT_NE(choice->how.find("'service'"), std::string::npos);
}

TEST(SelectWorkerAddressTest, FallsBackToContextSubnet) {
  ContextVars vars = {{"ETH0_IP", "192.0.2.77"},
                      {"ETH0_MASK", "255.255.255.0"},
                      {"ETH1_IP", "10.0.0.77"},
                      {"ETH1_MASK", "255.255.0.0"}};
  // No NETWORK names in OneGate (e.g. this VM is not listed yet).
  auto choice = SelectWorkerAddress("10.0.3.5", {Nic("", "10.0.3.5", "")}, {}, vars);
  ASSERT_TRUE(choice) << choice.error().message;
  EXPECT_EQ(choice->ip, "10.0.0.77");
  EXPECT_NE(choice->how.find("ETH1_IP"), std::string::npos);
  // Network known on the controller but this VM has no NIC on it: subnet fallback still works.
  auto fb = SelectWorkerAddress("10.0.3.5", {Nic("NIC0", "10.0.3.5", "service")},
                                {Nic("NIC0", "192.0.2.77", "public")}, vars);
  ASSERT_TRUE(fb);
  EXPECT_EQ(fb->ip, "10.0.0.77");
}

TEST(SelectWorkerAddressTest, NoMatchIsAClearError) {
  ContextVars vars = {{"ETH0_IP", "192.0.2.77"}, {"ETH0_MASK", "255.255.255.0"}};
  auto none = SelectWorkerAddress("10.0.0.5", {Nic("NIC0", "10.0.0.5", "service")},
                                  {Nic("NIC0", "192.0.2.77", "public")}, vars);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().kind, ErrorKind::kNotFound);
  EXPECT_NE(none.error().message.find("'service'"), std::string::npos);
  EXPECT_NE(none.error().message.find("ETH0_IP=192.0.2.77/255.255.255.0"), std::string::npos);
  EXPECT_FALSE(SelectWorkerAddress("not-an-ip", {}, {}, vars));
}

// ---- the compute NIC of an Open OnDemand VM ------------------------------------------------

VmNic Full(std::string name, std::string ip, std::string mac, std::string network,
           std::string network_id) {
  VmNic n = Nic(std::move(name), std::move(ip), std::move(network));
  n.mac = std::move(mac);
  n.network_id = std::move(network_id);
  return n;
}

// Management on NIC0, compute on NIC1, and a third NIC attached later: the context's last NIC
// is the new one, the compute NIC stays ETH1.
const ContextVars kThreeNics = {
    {"ETH0_IP", "192.0.2.10"}, {"ETH0_MAC", "02:00:c0:00:02:0a"}, {"ETH0_MASK", "255.255.255.0"},
    {"ETH1_IP", "10.1.0.7"},   {"ETH1_MAC", "02:00:0a:01:00:07"}, {"ETH1_MASK", "255.255.0.0"},
    {"ETH2_IP", "172.16.9.3"}, {"ETH2_MAC", "02:00:ac:10:09:03"}, {"ETH2_MASK", "255.255.255.0"}};
const std::vector<VmNic> kThreeOwn = {
    Full("NIC0", "192.0.2.10", "02:00:c0:00:02:0a", "public", "0"),
    Full("compute", "10.1.0.7", "02:00:0A:01:00:07", "hpc-compute", "7"),
    Full("NIC2", "172.16.9.3", "02:00:ac:10:09:03", "backup", "9")};

TEST(ComputeNicTest, TheNicNamedComputeNotTheLast) {
  auto nic = ChooseComputeNic(kThreeNics, "", &kThreeOwn);
  ASSERT_TRUE(nic) << nic.error().message;
  EXPECT_EQ(nic->nic.index, 1);  // matched by MAC, case-insensitively
  EXPECT_EQ(nic->nic.mask, "255.255.0.0");
  EXPECT_NE(nic->how.find("named 'compute'"), std::string::npos) << nic->how;
}

TEST(ComputeNicTest, TheSettingNamesTheNetworkByNameOrId) {
  auto by_name = ChooseComputeNic(kThreeNics, "backup", &kThreeOwn);
  ASSERT_TRUE(by_name) << by_name.error().message;
  EXPECT_EQ(by_name->nic.ip, "172.16.9.3");
  EXPECT_NE(by_name->how.find("ONEAPP_COMPUTE_NETWORK"), std::string::npos);
  auto by_id = ChooseComputeNic(kThreeNics, "0", &kThreeOwn);
  ASSERT_TRUE(by_id) << by_id.error().message;
  EXPECT_EQ(by_id->nic.ip, "192.0.2.10");
  auto unknown = ChooseComputeNic(kThreeNics, "hpc", &kThreeOwn);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().kind, ErrorKind::kInvalidInput);
  EXPECT_NE(unknown.error().message.find("ONEAPP_COMPUTE_NETWORK='hpc'"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("'hpc-compute' (id 7)"), std::string::npos)
      << unknown.error().message;
  auto no_onegate = ChooseComputeNic(kThreeNics, "backup", nullptr);
  ASSERT_FALSE(no_onegate);
  EXPECT_NE(no_onegate.error().message.find("TOKEN=YES"), std::string::npos);
}

TEST(ComputeNicTest, MatchedByAddressWithoutMac) {
  ContextVars vars = {{"ETH0_IP", "192.0.2.10"}, {"ETH1_IP", "10.1.0.7"}};
  std::vector<VmNic> own = {Nic("NIC0", "192.0.2.10", "public"),
                            Nic("compute", "10.1.0.7", "hpc-compute")};
  auto nic = ChooseComputeNic(vars, "", &own);
  ASSERT_TRUE(nic) << nic.error().message;
  EXPECT_EQ(nic->nic.index, 1);
  EXPECT_EQ(nic->nic.mask, "");
}

TEST(ComputeNicTest, OneNicIsTheComputeNic) {
  ContextVars vars = {{"ETH0_IP", "10.0.0.3"}};
  EXPECT_FALSE(ComputeNicNeedsOneGate(vars, ""));
  EXPECT_TRUE(ComputeNicNeedsOneGate(vars, "hpc"));
  auto nic = ChooseComputeNic(vars, "", nullptr);
  ASSERT_TRUE(nic) << nic.error().message;
  EXPECT_EQ(nic->nic.ip, "10.0.0.3");
  auto none = ChooseComputeNic({}, "", nullptr);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("NETWORK=YES"), std::string::npos);
}

TEST(ComputeNicTest, SeveralUnnamedNicsAreRefusedNeverTheLast) {
  std::vector<VmNic> own = {kThreeOwn[0], kThreeOwn[2]};
  own.push_back(Full("NIC1", "10.1.0.7", "02:00:0a:01:00:07", "hpc-compute", "7"));
  EXPECT_TRUE(ComputeNicNeedsOneGate(kThreeNics, ""));
  for (const std::vector<VmNic>* nics : {&own, static_cast<std::vector<VmNic>*>(nullptr)}) {
    auto r = ChooseComputeNic(kThreeNics, "", nics);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalidInput);
    EXPECT_NE(r.error().message.find("set ONEAPP_COMPUTE_NETWORK"), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("ETH2_IP=172.16.9.3"), std::string::npos);
  }
}

TEST(ComputeNicTest, ANamedNicMissingFromTheContextIsAnError) {
  ContextVars vars = {{"ETH0_IP", "192.0.2.10"},
                      {"ETH0_MAC", "02:00:c0:00:02:0a"},
                      {"ETH1_IP", "10.1.0.8"},
                      {"ETH1_MAC", "02:00:0a:01:00:08"}};
  auto r = ChooseComputeNic(vars, "", &kThreeOwn);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("has no IPv4 address in the context"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace onehpc::host
