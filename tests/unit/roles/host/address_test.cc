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

}  // namespace
}  // namespace onehpc::host
