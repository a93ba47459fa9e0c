// The portal's certificate with the real OpenSSL: an operator's pair is checked (key, names,
// expiry, encryption) without ever showing the key; a self-signed pair is made once on the
// state export and presented again by a replaced portal.
#include "roles/ood/certificate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <filesystem>

#include "common/base64.h"
#include "context/settings.h"
#include "roles/ood/settings.h"
#include "roles/ood/users.h"
#include "roles/portal.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/role_run.h"

namespace onehpc::ood {
namespace {

using fakes::FakeMachine;
using fakes::RoleRun;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kChain[] = "ONEAPP_PORTAL_CERTIFICATE_CHAIN";
constexpr char kKey[] = "ONEAPP_PORTAL_CERTIFICATE_KEY";

TEST(CertificateTest, ASelfSignedPairCoversItsNamesAndNoOther) {
  auto pair = MakeSelfSigned({"ood.example.org", "10.0.1.23"});
  ASSERT_TRUE(pair) << pair.error().message;
  EXPECT_THAT(pair->chain_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(pair->key_pem, HasSubstr("-----BEGIN PRIVATE KEY-----"));
  EXPECT_TRUE(StillServes(*pair, "ood.example.org", 800));
  EXPECT_TRUE(StillServes(*pair, "10.0.1.23", 800));
  EXPECT_FALSE(StillServes(*pair, "10.0.1.24", 0));
  EXPECT_FALSE(StillServes(*pair, "evil.example.org", 0));
  EXPECT_FALSE(StillServes(*pair, "ood.example.org", 900)) << "825 days, not more";
  auto other = MakeSelfSigned({"ood.example.org"});
  ASSERT_TRUE(other);
  EXPECT_FALSE(StillServes({pair->chain_pem, other->key_pem}, "ood.example.org", 0))
      << "another key";
}

TEST(CertificateTest, AnOperatorsPairIsCheckedAndReencoded) {
  auto pair = MakeSelfSigned({"ood.example.org", "10.0.1.23"});
  ASSERT_TRUE(pair);
  auto ok = CheckCertificate("junk before\n" + pair->chain_pem, pair->key_pem, "ood.example.org",
                             kChain, kKey);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->chain_pem, pair->chain_pem);
  EXPECT_EQ(ok->key_pem, pair->key_pem);
  EXPECT_TRUE(CheckCertificate(pair->chain_pem, pair->key_pem, "10.0.1.23", kChain, kKey));
}

TEST(CertificateTest, WrongPairsAreRefusedNamingTheVariableNeverTheKey) {
  auto pair = MakeSelfSigned({"ood.example.org"});
  auto other = MakeSelfSigned({"ood.example.org"});
  ASSERT_TRUE(pair && other);
  const std::string key_body = pair->key_pem.substr(28, 40);  // inside the base64
  struct Case {
    std::string chain, key, name, expected;
  };
  const std::vector<Case> cases = {
      {"not a certificate", pair->key_pem, "ood.example.org",
       "ONEAPP_PORTAL_CERTIFICATE_CHAIN holds no PEM certificate"},
      {pair->chain_pem, "not a key", "ood.example.org",
       "ONEAPP_PORTAL_CERTIFICATE_KEY (value not shown) holds no unencrypted PEM private key"},
      {pair->chain_pem, other->key_pem, "ood.example.org",
       "ONEAPP_PORTAL_CERTIFICATE_KEY is not the key of the first certificate"},
      {other->chain_pem + pair->chain_pem, pair->key_pem, "ood.example.org",
       "is not the key of the first certificate"},
      {pair->chain_pem, pair->key_pem, "portal.example.org",
       "does not cover the portal's name 'portal.example.org'"},
      {pair->chain_pem, pair->key_pem, "10.0.1.23", "does not cover the portal's name '10.0.1.23'"},
  };
  for (const auto& c : cases) {
    auto r = CheckCertificate(c.chain, c.key, c.name, kChain, kKey);
    ASSERT_FALSE(r) << c.expected;
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalidInput);
    EXPECT_THAT(r.error().message, HasSubstr(c.expected));
    EXPECT_THAT(r.error().message, Not(HasSubstr(key_body)));
  }
}

TEST(CertificateTest, AnEncryptedKeyIsRefusedWithoutAskingForAPassphrase) {
  auto pair = MakeSelfSigned({"ood.example.org"});
  ASSERT_TRUE(pair);
  // The same key, encrypted as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it.
  BIO* in = BIO_new_mem_buf(pair->key_pem.data(), static_cast<int>(pair->key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(in, nullptr, nullptr, nullptr);
  ASSERT_NE(key, nullptr);
  BIO* out = BIO_new(BIO_s_mem());
  char pass[] = "secret-phrase";
  ASSERT_EQ(PEM_write_bio_PKCS8PrivateKey(out, key, EVP_aes_256_cbc(), pass, sizeof(pass) - 1,
                                          nullptr, nullptr),
            1);
  char* data = nullptr;
  long len = BIO_get_mem_data(out, &data);  // NOLINT(runtime/int)
  const std::string encrypted(data, static_cast<size_t>(len));
  BIO_free(out);
  BIO_free(in);
  EVP_PKEY_free(key);
  ASSERT_THAT(encrypted, HasSubstr("ENCRYPTED PRIVATE KEY"));
  auto r = CheckCertificate(pair->chain_pem, encrypted, "ood.example.org", kChain, kKey);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("without a passphrase"));
}

class PortalCertificateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vars_ = {{"ETH0_IP", "10.0.1.23"},
             {"ETH0_MASK", "24"},
             {ood::kNfsHost, "10.0.1.5"},
             {ood::kLocalUsersVar, "alice:Wonderland-42"}};
  }
  Status Run(FakeMachine& m, const std::string& name, std::unique_ptr<RoleRun>* out = nullptr) {
    auto run = std::make_unique<RoleRun>(m, *role_, vars_, nullptr);
    auto s = EnsurePortalCertificate(*run->env, name, "10.0.1.23", kState);
    changes_ = run->Changes();
    if (out) *out = std::move(run);
    return s;
  }
  static constexpr char kState[] = "/var/lib/one-hpc/portal-state";
  std::unique_ptr<Role> role_ = MakePortalRole();
  ContextVars vars_;
  std::vector<std::string> changes_;
};

TEST_F(PortalCertificateTest, SelfSignedOnceKeptOnTheStateAndPresentedAgainByAReplacedPortal) {
  FakeMachine m;
  ASSERT_TRUE(Run(m, "10.0.1.23"));
  EXPECT_THAT(changes_,
              ::testing::ElementsAre("create /var/lib/one-hpc/portal-state/ssl (root:root, 0700)",
                                     "write /var/lib/one-hpc/portal-state/ssl/portal.key",
                                     "write /var/lib/one-hpc/portal-state/ssl/portal.crt",
                                     "write /etc/ood/ssl/10.0.1.23.key",
                                     "write /etc/ood/ssl/10.0.1.23.crt"));
  const std::string crt = m.Read("/etc/ood/ssl/10.0.1.23.crt");
  const std::string key = m.Read("/etc/ood/ssl/10.0.1.23.key");
  EXPECT_EQ(crt, m.Read(std::string(kState) + "/ssl/portal.crt"));
  EXPECT_TRUE(StillServes({crt, key}, "10.0.1.23", 800));
  EXPECT_EQ(m.Mode("/etc/ood/ssl/10.0.1.23.key"), 0600);
  EXPECT_EQ(m.Mode(std::string(kState) + "/ssl/portal.key"), 0600);
  EXPECT_EQ(m.Mode("/etc/ood/ssl/10.0.1.23.crt"), 0644);

  ASSERT_TRUE(Run(m, "10.0.1.23"));
  EXPECT_TRUE(changes_.empty()) << ::testing::PrintToString(changes_);

  // A replaced portal: a new root disk, the same state export.
  FakeMachine replaced;
  replaced.Write(std::string(kState) + "/ssl/portal.crt", crt);
  replaced.Write(std::string(kState) + "/ssl/portal.key", key);
  ASSERT_TRUE(Run(replaced, "10.0.1.23"));
  EXPECT_EQ(replaced.Read("/etc/ood/ssl/10.0.1.23.crt"), crt);
  EXPECT_EQ(replaced.Read("/etc/ood/ssl/10.0.1.23.key"), key);

  // A new public name the pair does not cover: a new pair.
  ASSERT_TRUE(Run(replaced, "ood.example.org"));
  EXPECT_NE(replaced.Read("/etc/ood/ssl/ood.example.org.crt"), crt);
  EXPECT_TRUE(StillServes({replaced.Read("/etc/ood/ssl/ood.example.org.crt"),
                           replaced.Read("/etc/ood/ssl/ood.example.org.key")},
                          "ood.example.org", 800));
}

TEST_F(PortalCertificateTest, TheOperatorsPairIsInstalledAndNeverKeptOnTheState) {
  auto pair = MakeSelfSigned({"ood.example.org"});
  ASSERT_TRUE(pair);
  vars_[kChain] = Base64Encode(pair->chain_pem);
  vars_[kKey] = Base64Encode(pair->key_pem);
  FakeMachine m;
  ASSERT_TRUE(Run(m, "ood.example.org"));
  EXPECT_EQ(m.Read("/etc/ood/ssl/ood.example.org.crt"), pair->chain_pem);
  EXPECT_EQ(m.Read("/etc/ood/ssl/ood.example.org.key"), pair->key_pem);
  EXPECT_FALSE(m.Exists(std::string(kState) + "/ssl/portal.key"));
}

// Review finding N3: the operator's pair placed on the state export (ssl/site.crt, site.key)
// keeps the key off the CONTEXT, which every VM of the service reads through OneGate. A
// replaced portal finds it there too. The key must be root's alone; one way at a time.
TEST_F(PortalCertificateTest, TheOperatorsPairOnTheStateKeepsTheKeyOffTheContext) {
  auto pair = MakeSelfSigned({"ood.example.org"});
  ASSERT_TRUE(pair);
  const std::string ssl = std::string(kState) + "/ssl";
  FakeMachine m;
  m.Write(ssl + "/site.crt", pair->chain_pem);
  m.Write(ssl + "/site.key", pair->key_pem);
  ::chmod((m.root + ssl + "/site.key").c_str(), 0644);
  auto open = Run(m, "ood.example.org");
  ASSERT_FALSE(open);
  EXPECT_EQ(open.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(open.error().message, HasSubstr(ssl + "/site.key must be a file of root's"));
  EXPECT_THAT(open.error().message, Not(HasSubstr("PRIVATE KEY")));
  ::chmod((m.root + ssl + "/site.key").c_str(), 0600);
  ASSERT_TRUE(Run(m, "ood.example.org"));
  EXPECT_EQ(m.Read("/etc/ood/ssl/ood.example.org.crt"), pair->chain_pem);
  EXPECT_EQ(m.Read("/etc/ood/ssl/ood.example.org.key"), pair->key_pem);
  EXPECT_FALSE(m.Exists(ssl + "/portal.key"));  // no self-signed pair made
  // A name the pair does not cover names the file; the CONTEXT's pair as well: refused.
  auto other = Run(m, "portal.example.org");
  ASSERT_FALSE(other);
  EXPECT_THAT(other.error().message, HasSubstr(ssl + "/site.crt"));
  vars_[kChain] = Base64Encode(pair->chain_pem);
  vars_[kKey] = Base64Encode(pair->key_pem);
  auto twice = Run(m, "ood.example.org");
  ASSERT_FALSE(twice);
  EXPECT_THAT(twice.error().message, HasSubstr("given twice"));
  vars_.erase(kChain);
  vars_.erase(kKey);
  // Half of it: refused.
  std::filesystem::remove(m.root + ssl + "/site.crt");
  auto half = Run(m, "ood.example.org");
  ASSERT_FALSE(half);
  EXPECT_THAT(half.error().message, HasSubstr("go together"));
}

TEST_F(PortalCertificateTest, AHalfGivenOrWrongPairStopsBeforeAnyChange) {
  auto pair = MakeSelfSigned({"ood.example.org"});
  ASSERT_TRUE(pair);
  vars_[kChain] = Base64Encode(pair->chain_pem);
  FakeMachine m;
  auto s = Run(m, "ood.example.org");
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("go together"));
  vars_[kKey] = Base64Encode(pair->key_pem);
  s = Run(m, "portal.example.org");
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("does not cover the portal's name"));
  EXPECT_TRUE(changes_.empty());
  EXPECT_FALSE(m.Exists("/etc/ood/ssl/portal.example.org.key"));
}

}  // namespace
}  // namespace onehpc::ood
