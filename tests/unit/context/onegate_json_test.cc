// ParseVmJson / ParseServiceJson against onegate-api.md's composed examples (verbatim) and
// variants of the typing quirks of sections 5, 6 and 11.
#include <gtest/gtest.h>

#include <string>

#include "context/onegate.h"

namespace onehpc {
namespace {

// onegate-api.md section 5, verbatim.
constexpr char kDocVm[] =
    R"json({"VM":{"NAME":"compute_2_(service_19)","ID":"311","STATE":"3","LCM_STATE":"3",
  "USER_TEMPLATE":{"ROLE_NAME":"compute","SERVICE_ID":"19","READY":"YES",
    "SLURM_NODENAME":"hpc-w-311","ONEAPP_NOTE":{},
    "USER_INPUTS":{"ONEAPP_NOTE":"O|text|Note||"}},
  "TEMPLATE":{"NIC":[{"IP":"172.16.4.23","MAC":"02:00:ac:10:04:17","NAME":"NIC0","NETWORK":"hpc-private"},
                     {"IP":"192.0.2.40","MAC":"02:00:c0:00:02:28","NAME":"NIC1","NETWORK":"public"}],
              "NIC_ALIAS":[]}}})json";

// onegate-api.md section 6, verbatim.
constexpr char kDocService[] = R"json({"SERVICE":{"id":"19","name":"hpc","state":10,"roles":[
  {"name":"head","cardinality":1,"state":2,"nodes":[
    {"deploy_id":300,"running":null,"vm_info":{"VM":{"ID":"300","NAME":"head_0_(service_19)",
      "UID":"5","GID":"1","UNAME":"alice","GNAME":"users"}}}]},
  {"name":"compute","cardinality":2,"state":10,"nodes":[
    {"deploy_id":305,"running":null,"vm_info":{"VM":{"ID":"305","NAME":"compute_0_(service_19)",
      "UID":"5","GID":"1","UNAME":"alice","GNAME":"users"}}},
    {"deploy_id":311,"running":null,"vm_info":{"VM":{"ID":"311","NAME":"compute_2_(service_19)",
      "UID":"5","GID":"1","UNAME":"alice","GNAME":"users"}}}]}]}})json";

// onegate-api.md section 6.1's extended node fragment, verbatim, inside a service.
constexpr char kDocExtendedNode[] =
    R"json({"deploy_id":305,"running":null,"vm_info":{"VM":{"ID":"305","NAME":"compute_0_(service_19)",
  "STATE":"3","LCM_STATE":"3","STIME":"1767000000",
  "USER_TEMPLATE":{"ROLE_NAME":"compute","SERVICE_ID":"19","SLURM_NODENAME":"hpc-w-305"},
  "TEMPLATE":{"NIC":{"IP":"172.16.4.21","MAC":"02:00:ac:10:04:15","NETWORK":"hpc-private","NIC_ID":"0"},
              "CONTEXT":{"TOKEN":"YES","ONEAPP_ADMIN_PASSWORD":"..."}}}}})json";

std::string ExtendedService() {
  return std::string(R"({"SERVICE":{"id":"19","name":"hpc","state":2,"roles":[)") +
         R"({"name":"compute","cardinality":1,"state":2,"nodes":[)" + kDocExtendedNode + "]}]}}";
}

TEST(OneGateJsonTest, DocVmExample) {
  auto vm = ParseVmJson(kDocVm);
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(vm->id, 311);
  EXPECT_EQ(vm->name, "compute_2_(service_19)");
  EXPECT_EQ(vm->state, 3);
  EXPECT_EQ(vm->lcm_state, 3);
  EXPECT_EQ(vm->Attr("ROLE_NAME"), "compute");
  EXPECT_EQ(vm->Attr("SERVICE_ID"), "19");
  EXPECT_EQ(vm->Attr("READY"), "YES");
  EXPECT_EQ(vm->Attr("SLURM_NODENAME"), "hpc-w-311");
  // {} reads as "", present.
  ASSERT_EQ(vm->user_template.count("ONEAPP_NOTE"), 1u);
  EXPECT_EQ(vm->Attr("ONEAPP_NOTE"), "");
  // Nested objects are skipped.
  EXPECT_EQ(vm->user_template.count("USER_INPUTS"), 0u);
  EXPECT_EQ(vm->Attr("ABSENT"), "");
  ASSERT_EQ(vm->nics.size(), 2u);
  EXPECT_EQ(vm->nics[0].ip, "172.16.4.23");
  EXPECT_EQ(vm->nics[0].mac, "02:00:ac:10:04:17");
  EXPECT_EQ(vm->nics[0].name, "NIC0");
  EXPECT_EQ(vm->nics[0].nic_id, "0");
  EXPECT_EQ(vm->nics[0].network, "hpc-private");
  EXPECT_EQ(vm->nics[1].ip, "192.0.2.40");
  EXPECT_EQ(vm->nics[1].nic_id, "1");
  EXPECT_EQ(vm->nics[1].network, "public");
  EXPECT_TRUE(vm->context.empty());
  EXPECT_TRUE(vm->external_ips.empty());
}

TEST(OneGateJsonTest, DocServiceExample) {
  auto service = ParseServiceJson(kDocService);
  ASSERT_TRUE(service) << service.error().message;
  EXPECT_EQ(service->id, "19");
  EXPECT_EQ(service->name, "hpc");
  EXPECT_EQ(service->state, 10);
  ASSERT_EQ(service->roles.size(), 2u);
  const ServiceRole* head = service->FindRole("head");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->cardinality, 1);
  EXPECT_EQ(head->state, 2);
  ASSERT_EQ(head->nodes.size(), 1u);
  EXPECT_EQ(head->nodes[0].vm_id, 300);
  EXPECT_EQ(head->nodes[0].vm_name, "head_0_(service_19)");
  EXPECT_FALSE(head->nodes[0].vm.has_value());  // compact: no full VM
  const ServiceRole* compute = service->FindRole("compute");
  ASSERT_NE(compute, nullptr);
  EXPECT_EQ(compute->cardinality, 2);
  EXPECT_EQ(compute->state, 10);
  ASSERT_EQ(compute->nodes.size(), 2u);
  EXPECT_EQ(compute->nodes[0].vm_id, 305);  // creation order kept
  EXPECT_EQ(compute->nodes[1].vm_id, 311);
  EXPECT_EQ(compute->nodes[1].vm_name, "compute_2_(service_19)");
  EXPECT_EQ(service->FindRole("storage"), nullptr);
}

TEST(OneGateJsonTest, DocExtendedNodeWithNicObjectAndContext) {
  auto service = ParseServiceJson(ExtendedService());
  ASSERT_TRUE(service) << service.error().message;
  const ServiceRole* compute = service->FindRole("compute");
  ASSERT_NE(compute, nullptr);
  ASSERT_EQ(compute->nodes.size(), 1u);
  const ServiceNode& node = compute->nodes[0];
  EXPECT_EQ(node.vm_id, 305);
  EXPECT_EQ(node.vm_name, "compute_0_(service_19)");
  ASSERT_TRUE(node.vm.has_value());
  EXPECT_EQ(node.vm->id, 305);
  EXPECT_EQ(node.vm->state, 3);
  EXPECT_EQ(node.vm->lcm_state, 3);
  EXPECT_EQ(node.vm->Attr("SLURM_NODENAME"), "hpc-w-305");
  ASSERT_EQ(node.vm->nics.size(), 1u);  // NIC as an object
  EXPECT_EQ(node.vm->nics[0].ip, "172.16.4.21");
  EXPECT_EQ(node.vm->nics[0].nic_id, "0");
  EXPECT_EQ(node.vm->nics[0].name, "");
  EXPECT_EQ(node.vm->nics[0].network, "hpc-private");
  EXPECT_EQ(node.vm->context.at("TOKEN"), "YES");
  EXPECT_EQ(node.vm->context.at("ONEAPP_ADMIN_PASSWORD"), "...");
}

TEST(OneGateJsonTest, ExtendedNicArrayWithIpv6AndNetworkId) {
  auto vm = ParseVmJson(R"({"VM":{"ID":"7","TEMPLATE":{"NIC":[
      {"NIC_ID":"0","NAME":"NIC0","IP":"10.0.0.7","IP6":"fd00::7","NETWORK_ID":"12","NETWORK":"a"},
      {"NIC_ID":"1","NAME":"NIC1","IP6_GLOBAL":"2001:db8::7","IP6":"fd00::8","NETWORK":"b"}]}}})");
  ASSERT_TRUE(vm) << vm.error().message;
  ASSERT_EQ(vm->nics.size(), 2u);
  EXPECT_EQ(vm->nics[0].ip6, "fd00::7");
  EXPECT_EQ(vm->nics[0].network_id, "12");
  EXPECT_EQ(vm->nics[1].ip, "");
  EXPECT_EQ(vm->nics[1].ip6, "2001:db8::7");  // IP6_GLOBAL preferred
}

TEST(OneGateJsonTest, IntegersAcceptedWhereStringsAreUsualAndViceVersa) {
  auto vm = ParseVmJson(R"({"VM":{"ID":311,"STATE":3,"LCM_STATE":"3","NAME":"x",
      "USER_TEMPLATE":{"COUNT":4,"RATIO":1.5,"FLAG":true,"NONE":null}}})");
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(vm->id, 311);
  EXPECT_EQ(vm->state, 3);
  EXPECT_EQ(vm->Attr("COUNT"), "4");
  EXPECT_EQ(vm->Attr("RATIO"), "1.5");
  EXPECT_EQ(vm->Attr("FLAG"), "true");
  EXPECT_EQ(vm->Attr("NONE"), "");

  auto service = ParseServiceJson(R"({"SERVICE":{"id":19,"name":"hpc","state":"2","roles":[
      {"name":"w","cardinality":"3","state":"2","nodes":[{"deploy_id":"42","running":true}]}]}})");
  ASSERT_TRUE(service) << service.error().message;
  EXPECT_EQ(service->id, "19");
  EXPECT_EQ(service->state, 2);
  EXPECT_EQ(service->roles[0].cardinality, 3);
  EXPECT_EQ(service->roles[0].nodes[0].vm_id, 42);
  EXPECT_EQ(service->roles[0].nodes[0].vm_name, "");
}

TEST(OneGateJsonTest, EmptyObjectsAndMissingOptionalFields) {
  auto vm = ParseVmJson(R"({"VM":{"ID":"5","NAME":{},"STATE":{},"USER_TEMPLATE":{},
      "TEMPLATE":{"NIC":{}}}})");
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(vm->name, "");
  EXPECT_EQ(vm->state, -1);
  EXPECT_EQ(vm->lcm_state, -1);
  EXPECT_TRUE(vm->user_template.empty());
  EXPECT_TRUE(vm->nics.empty());

  auto bare = ParseVmJson(R"({"VM":{"ID":"5"}})");
  ASSERT_TRUE(bare);
  EXPECT_TRUE(bare->nics.empty());

  // A role with no nodes yet (cardinality raised before VMs exist), nodes null or absent.
  auto service = ParseServiceJson(R"({"SERVICE":{"id":"1","roles":[
      {"name":"a","cardinality":2,"nodes":[]},{"name":"b","cardinality":0,"nodes":null},
      {"name":"c","cardinality":1}]}})");
  ASSERT_TRUE(service) << service.error().message;
  EXPECT_EQ(service->state, -1);
  EXPECT_EQ(service->name, "");
  ASSERT_EQ(service->roles.size(), 3u);
  EXPECT_TRUE(service->roles[0].nodes.empty());
  EXPECT_TRUE(service->roles[1].nodes.empty());
  EXPECT_EQ(service->roles[2].state, -1);

  auto empty_roles = ParseServiceJson(R"({"SERVICE":{"id":"1","roles":[]}})");
  ASSERT_TRUE(empty_roles);
  EXPECT_TRUE(empty_roles->roles.empty());
}

TEST(OneGateJsonTest, NodeWithoutIpYet) {
  auto vm = ParseVmJson(R"({"VM":{"ID":"9","TEMPLATE":{"NIC":[{"NAME":"NIC0","NETWORK":"p",
      "MAC":"02:00:00:00:00:09"}]}}})");
  ASSERT_TRUE(vm);
  ASSERT_EQ(vm->nics.size(), 1u);
  EXPECT_EQ(vm->nics[0].ip, "");
  EXPECT_EQ(vm->nics[0].network, "p");
}

TEST(OneGateJsonTest, OpenNebula610ExternalIpEntriesAreNotNics) {
  auto vm = ParseVmJson(R"({"VM":{"ID":"311","TEMPLATE":{"NIC":[
      {"IP":"172.16.4.23","MAC":"02:00:ac:10:04:17","NAME":"NIC0","NETWORK":"hpc-private"},
      {"IP":"203.0.113.9"},{"IP":"198.51.100.1"},{}]}}})");
  ASSERT_TRUE(vm) << vm.error().message;
  ASSERT_EQ(vm->nics.size(), 1u);
  EXPECT_EQ(vm->nics[0].name, "NIC0");
  EXPECT_EQ(vm->external_ips, (std::vector<std::string>{"203.0.113.9", "198.51.100.1"}));
}

TEST(OneGateJsonTest, NestedAndArrayUserTemplateValuesAreSkipped) {
  auto vm = ParseVmJson(R"({"VM":{"ID":"1","USER_TEMPLATE":{"A":"1","V":{"X":"y"},
      "L":["p","q"],"E":{}}}})");
  ASSERT_TRUE(vm);
  EXPECT_EQ(vm->user_template.size(), 2u);
  EXPECT_EQ(vm->Attr("A"), "1");
  EXPECT_EQ(vm->Attr("E"), "");
}

TEST(OneGateJsonTest, NicEntriesThatAreNotObjectsAreIgnored) {
  auto vm = ParseVmJson(R"({"VM":{"ID":"1","TEMPLATE":{"NIC":["x",3,null,
      {"NAME":"NIC2","IP":"10.0.0.1"}]}}})");
  ASSERT_TRUE(vm);
  ASSERT_EQ(vm->nics.size(), 1u);
  EXPECT_EQ(vm->nics[0].nic_id, "2");
}

TEST(OneGateJsonTest, ExtendedVmWithoutIdTakesDeployId) {
  auto service = ParseServiceJson(R"({"SERVICE":{"id":"1","roles":[{"name":"a","cardinality":1,
      "nodes":[{"deploy_id":77,"vm_info":{"VM":{"STATE":"3","TEMPLATE":{}}}}]}]}})");
  ASSERT_TRUE(service) << service.error().message;
  ASSERT_TRUE(service->roles[0].nodes[0].vm.has_value());
  EXPECT_EQ(service->roles[0].nodes[0].vm->id, 77);
}

struct BadCase {
  const char* json;
  const char* expected;  // a substring of the error message
};

class OneGateJsonVmErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(OneGateJsonVmErrorTest, IsInvalidInputNamingTheProblem) {
  auto vm = ParseVmJson(GetParam().json);
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().kind, ErrorKind::kInvalidInput);
  EXPECT_NE(vm.error().message.find(GetParam().expected), std::string::npos) << vm.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OneGateJsonVmErrorTest,
    ::testing::Values(
        BadCase{"", "malformed JSON at byte"}, BadCase{R"({"VM":{"ID":"1")", "malformed JSON"},
        BadCase{"not json", "malformed JSON"}, BadCase{"[]", "\"VM\""},
        BadCase{R"({"vm":{}})", "\"VM\""}, BadCase{R"({"VM":[]})", "VM: expected an object"},
        BadCase{R"({"VM":{"NAME":"x"}})", "VM.ID is missing"},
        BadCase{R"({"VM":{"ID":{}}})", "VM.ID is missing"},
        BadCase{R"({"VM":{"ID":"abc"}})", "VM.ID: expected an integer, got \"abc\""},
        BadCase{R"({"VM":{"ID":"12x"}})", "VM.ID: expected an integer"},
        BadCase{R"({"VM":{"ID":"99999999999"}})", "VM.ID: expected an integer"},
        BadCase{R"({"VM":{"ID":1.5}})", "VM.ID: expected an integer"},
        BadCase{R"({"VM":{"ID":["1"]}})", "VM.ID: expected an integer, got a JSON array"},
        BadCase{R"({"VM":{"ID":"1","STATE":"running"}})", "VM.STATE"}));

class OneGateJsonServiceErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(OneGateJsonServiceErrorTest, IsInvalidInputNamingTheProblem) {
  auto service = ParseServiceJson(GetParam().json);
  ASSERT_FALSE(service);
  EXPECT_EQ(service.error().kind, ErrorKind::kInvalidInput);
  EXPECT_NE(service.error().message.find(GetParam().expected), std::string::npos)
      << service.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OneGateJsonServiceErrorTest,
    ::testing::Values(
        BadCase{"{", "malformed JSON"}, BadCase{R"({"VM":{"ID":"1"}})", "\"SERVICE\""},
        BadCase{R"({"SERVICE":"19"})", "\"SERVICE\""},
        BadCase{R"({"SERVICE":{"id":"19"}})", "SERVICE.roles is missing"},
        BadCase{R"({"SERVICE":{"id":"19","roles":null}})", "SERVICE.roles is missing"},
        BadCase{R"({"SERVICE":{"id":"19","roles":"x"}})", "SERVICE.roles: expected an array"},
        BadCase{R"({"SERVICE":{"roles":[3]}})", "SERVICE.roles[0]: expected an object"},
        BadCase{R"({"SERVICE":{"roles":[{"cardinality":1}]}})", "SERVICE.roles[0].name is missing"},
        BadCase{R"({"SERVICE":{"roles":[{"name":"a"}]}})",
                "SERVICE.roles[0].cardinality is missing"},
        BadCase{R"({"SERVICE":{"roles":[{"name":"a","cardinality":1},{"name":"b","cardinality":1,
            "nodes":[{"deploy_id":1},{"running":null}]}]}})",
                "SERVICE.roles[1].nodes[1].deploy_id is missing"},
        BadCase{R"({"SERVICE":{"roles":[{"name":"a","cardinality":1,"nodes":"x"}]}})",
                "SERVICE.roles[0].nodes: expected an array"},
        BadCase{R"({"SERVICE":{"roles":[{"name":"a","cardinality":1,"nodes":[{"deploy_id":1,
            "vm_info":{"VM":{"ID":"1","STATE":"bad"}}}]}]}})",
                "SERVICE.roles[0].nodes[0].vm_info.VM.STATE"}));

TEST(OneGateJsonTest, ErrorsNeverQuoteTheDocument) {
  // A secret in a document that fails to parse must not end up in the message.
  auto service = ParseServiceJson(
      R"({"SERVICE":{"roles":[{"name":"a","cardinality":1,"nodes":[{"deploy_id":1,"vm_info":)"
      R"({"VM":{"TEMPLATE":{"CONTEXT":{"PASSWORD":"hunter2-secret"}}}}}]}]}} trailing)");
  ASSERT_FALSE(service);
  EXPECT_EQ(service.error().message.find("hunter2"), std::string::npos);
  auto vm = ParseVmJson(R"({"VM":{"ID":"1","USER_TEMPLATE":{"K":"hunter2-secret)");
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().message.find("hunter2"), std::string::npos);
}

TEST(OneGateJsonTest, InvalidUtf8AndDeepNestingDoNotThrow) {
  EXPECT_FALSE(ParseVmJson(std::string("{\"VM\":{\"ID\":\"1\",\"NAME\":\"\xff\"}}")));
  std::string deep(5000, '[');
  EXPECT_FALSE(ParseVmJson(deep));
  std::string deep_valid = std::string(2000, '[') + std::string(2000, ']');
  EXPECT_FALSE(ParseServiceJson(deep_valid));
}

}  // namespace
// TEMPLATE.DISK in the unfiltered VM hash: an object for one disk, an array for several.
TEST(OneGateJsonTest, DisksAreReadFromAnObjectOrAnArray) {
  auto one = ParseVmJson(
      R"({"VM":{"ID":"7","NAME":"s","STATE":"3","LCM_STATE":"3","USER_TEMPLATE":{},)"
      R"("TEMPLATE":{"DISK":{"DISK_ID":"0","TARGET":"vda","IMAGE":"os","PERSISTENT":"NO"}}}})");
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_TRUE(one->disks_listed);
  ASSERT_EQ(one->disks.size(), 1u);
  EXPECT_EQ(one->disks[0].target, "vda");
  EXPECT_FALSE(one->disks[0].persistent);
  auto two =
      ParseVmJson(R"({"VM":{"ID":"7","NAME":"s","STATE":"3","LCM_STATE":"3","USER_TEMPLATE":{},)"
                  R"("TEMPLATE":{"DISK":[{"TARGET":"vda","IMAGE":"os"},)"
                  R"({"TARGET":"vdb","IMAGE":"ood-home","PERSISTENT":"YES","SIZE":"10240"},)"
                  R"({"TARGET":"vdc","TYPE":"fs","SIZE":"1024"}]}}})");
  ASSERT_TRUE(two) << two.error().message;
  ASSERT_EQ(two->disks.size(), 3u);
  EXPECT_EQ(two->disks[1].image, "ood-home");
  EXPECT_TRUE(two->disks[1].persistent);
  EXPECT_EQ(two->disks[2].type, "fs");
  EXPECT_TRUE(two->disks[2].image.empty());
  auto none = ParseVmJson(R"({"VM":{"ID":"7","NAME":"s","USER_TEMPLATE":{},"TEMPLATE":{}}})");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->disks_listed);
}

}  // namespace onehpc
