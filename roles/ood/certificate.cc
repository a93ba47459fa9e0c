#include "roles/ood/certificate.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <optional>

#include "common/log.h"
#include "roles/ensure.h"
#include "roles/ood/ood_yaml.h"
#include "roles/ood/settings.h"
#include "roles/role.h"

namespace onehpc::ood {
namespace {

constexpr int kSelfSignedDays = 825;  // the longest validity browsers accept
constexpr int kRenewDays = 30;        // a self-signed pair this close to its end is made again

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
struct BnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's last error as text (the error queue is cleared).
std::string SslError() {
  unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

// Never asks for a passphrase: an encrypted key is refused.
int NoPassphrase(char*, int, int, void*) { return 0; }

BioPtr ReadBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::vector<X509Ptr> ParseChain(const std::string& pem) {
  std::vector<X509Ptr> chain;
  auto bio = ReadBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    chain.emplace_back(x);
  }
  ERR_clear_error();  // the end of the input reads as an error
  return chain;
}

PkeyPtr ParseKey(const std::string& pem) {
  auto bio = ReadBio(pem);
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  return key;
}

bool IsIpv4(const std::string& name) {
  in_addr a{};
  return inet_pton(AF_INET, name.c_str(), &a) == 1;
}

bool Covers(X509* leaf, const std::string& name) {
  if (IsIpv4(name)) return X509_check_ip_asc(leaf, name.c_str(), 0) == 1;
  return X509_check_host(leaf, name.data(), name.size(), 0, nullptr) == 1;
}

// Days from now to the leaf's notAfter (negative: expired).
int DaysLeft(X509* leaf) {
  int days = 0;
  int secs = 0;
  if (ASN1_TIME_diff(&days, &secs, nullptr, X509_get0_notAfter(leaf)) != 1) return -1;
  return days - (secs < 0 ? 1 : 0);
}

std::string MemText(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);  // NOLINT(runtime/int): OpenSSL's type
  return std::string(data, static_cast<size_t>(len));
}

// The chain and its key as PEM text (nothing else: junk around an operator's PEM is dropped).
Result<CertificatePair> Encode(const std::vector<X509Ptr>& chain, EVP_PKEY* key) {
  BioPtr certs(BIO_new(BIO_s_mem()));
  for (const auto& x : chain) {
    if (PEM_write_bio_X509(certs.get(), x.get()) != 1) {
      return Fail(ErrorKind::kInternal, "cannot encode the certificate: " + SslError());
    }
  }
  BioPtr key_pem(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(key_pem.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Fail(ErrorKind::kInternal, "cannot encode the private key: " + SslError());
  }
  return CertificatePair{MemText(certs.get()), MemText(key_pem.get())};
}

Status AddExtension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, ExtFree> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Fail(ErrorKind::kInternal,
                fmt::format("cannot add the extension '{}': {}", value, SslError()));
  }
  return Ok();
}

tl::unexpected<Error> Invalid(const std::string& message) {
  return Fail(ErrorKind::kInvalidInput, message);
}

}  // namespace

Result<CertificatePair> CheckCertificate(const std::string& chain_pem, const std::string& key_pem,
                                         const std::string& server_name,
                                         const std::string& chain_setting,
                                         const std::string& key_setting) {
  auto chain = ParseChain(chain_pem);
  if (chain.empty()) {
    return Invalid(
        fmt::format("{} holds no PEM certificate: expected the base64 of the server's certificate "
                    "(-----BEGIN CERTIFICATE-----), then its intermediates",
                    chain_setting));
  }
  auto key = ParseKey(key_pem);
  if (!key) {
    return Invalid(fmt::format(
        "{} (value not shown) holds no unencrypted PEM private key: expected the base64 of "
        "the key file (-----BEGIN PRIVATE KEY----- or a traditional RSA/EC key), without a "
        "passphrase",
        key_setting));
  }
  X509* leaf = chain.front().get();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return Invalid(
        fmt::format("{} is not the key of the first certificate in {} (value not shown): give the "
                    "server's certificate first and its own key",
                    key_setting, chain_setting));
  }
  if (!Covers(leaf, server_name)) {
    return Invalid(fmt::format(
        "the first certificate in {} does not cover the portal's name '{}' (its subjectAltName "
        "must name it; an address must be an IP entry): set ONEAPP_PORTAL_HOST_NAME to a name "
        "it covers, or give a certificate for '{}'",
        chain_setting, server_name, server_name));
  }
  if (DaysLeft(leaf) < 0) {
    return Invalid(fmt::format("the first certificate in {} has expired", chain_setting));
  }
  return Encode(chain, key.get());
}

Result<CertificatePair> MakeSelfSigned(const std::vector<std::string>& names) {
  if (names.empty()) return Fail(ErrorKind::kInternal, "a certificate needs a name");
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Fail(ErrorKind::kInternal, "cannot make an EC key: " + SslError());
  X509Ptr cert(X509_new());
  std::unique_ptr<BIGNUM, BnFree> serial(BN_new());
  if (!cert || !serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      X509_set_version(cert.get(), 2) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400L * kSelfSignedDays) == nullptr ||
      X509_set_pubkey(cert.get(), key.get()) != 1) {
    return Fail(ErrorKind::kInternal, "cannot make the certificate: " + SslError());
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const auto* cn = reinterpret_cast<const unsigned char*>(names.front().c_str());
  if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, cn, -1, -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), subject) != 1) {
    return Fail(ErrorKind::kInternal, "cannot name the certificate: " + SslError());
  }
  std::string san;
  for (const auto& n : names) {
    if (!san.empty()) san += ",";
    san += (IsIpv4(n) ? "IP:" : "DNS:") + n;
  }
  for (const auto& [nid, value] :
       std::vector<std::pair<int, std::string>>{{NID_basic_constraints, "critical,CA:FALSE"},
                                                {NID_key_usage, "critical,digitalSignature"},
                                                {NID_ext_key_usage, "serverAuth"},
                                                {NID_subject_key_identifier, "hash"},
                                                {NID_subject_alt_name, san}}) {
    if (auto s = AddExtension(cert.get(), nid, value); !s) return Fail(s.error());
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return Fail(ErrorKind::kInternal, "cannot sign the certificate: " + SslError());
  }
  std::vector<X509Ptr> chain;
  chain.push_back(std::move(cert));
  return Encode(chain, key.get());
}

bool StillServes(const CertificatePair& pair, const std::string& server_name, int min_days) {
  auto chain = ParseChain(pair.chain_pem);
  auto key = ParseKey(pair.key_pem);
  if (chain.empty() || !key) return false;
  X509* leaf = chain.front().get();
  bool ok = X509_check_private_key(leaf, key.get()) == 1 && Covers(leaf, server_name) &&
            DaysLeft(leaf) >= min_days;
  ERR_clear_error();
  return ok;
}

namespace {

// The operator's pair placed on the state export (ssl/site.crt and ssl/site.key, the key root's
// and 0600): a certificate key that never travels through the CONTEXT, which every VM of the
// service can read. nullopt when neither file is there.
Result<std::optional<CertificatePair>> SitePairOnTheState(RoleEnv& env, const std::string& dir,
                                                          const std::string& server_name) {
  const std::string crt = dir + "/" + kSiteCertFile;
  const std::string key = dir + "/" + kSiteKeyFile;
  auto chain = env.files.ReadIfExists(crt);
  if (!chain) return Fail(chain.error());
  auto key_pem = env.files.ReadIfExists(key);
  if (!key_pem) return Fail(key_pem.error());
  if (!*chain && !*key_pem) return std::optional<CertificatePair>();
  if (!*chain || !*key_pem) {
    return Invalid(fmt::format("{} and {} go together: put both there, or neither", crt, key));
  }
  if (env.settings.IsSet(kPortalCertChain) || env.settings.IsSet(kPortalCertKey)) {
    return Invalid(
        fmt::format("the portal's certificate is given twice, in {} and in {}: "
                    "remove one (the files keep the key off the CONTEXT)",
                    kPortalCertChain, crt));
  }
  struct stat st {};
  const std::string host_key = env.files.HostPath(key);
  if (::lstat(host_key.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0) {
    return Fail(ErrorKind::kUnsafe,
                key + " must be a file of root's that nobody else can read (chmod 0600)");
  }
  auto checked = CheckCertificate(**chain, **key_pem, server_name, crt, key);
  if (!checked) return Fail(checked.error());
  return std::optional<CertificatePair>(std::move(*checked));
}

}  // namespace

Status EnsurePortalCertificate(RoleEnv& env, const std::string& server_name,
                               const std::string& address, const std::string& state_dir) {
  const FileOwner root{"root", "root"};
  CertificatePair pair;
  auto site = SitePairOnTheState(env, state_dir + "/ssl", server_name);
  if (!site) return Fail(site.error());
  if (site->has_value()) {
    pair = std::move(**site);
    log::Info("portal: the certificate from {}/ssl/{} covers '{}'", state_dir, kSiteCertFile,
              server_name);
  } else if (env.settings.IsSet(kPortalCertChain) || env.settings.IsSet(kPortalCertKey)) {
    if (!env.settings.IsSet(kPortalCertChain) || !env.settings.IsSet(kPortalCertKey)) {
      return Invalid(
          fmt::format("{} and {} go together: give both, or neither for a "
                      "self-signed certificate",
                      kPortalCertChain, kPortalCertKey));
    }
    auto checked = CheckCertificate(env.settings.GetString(kPortalCertChain),
                                    env.settings.GetString(kPortalCertKey), server_name,
                                    kPortalCertChain, kPortalCertKey);
    if (!checked) return Fail(checked.error());
    pair = std::move(*checked);
    log::Info("portal: the certificate from {} covers '{}'", kPortalCertChain, server_name);
  } else {
    // The self-signed pair lives on the state export: a replaced portal presents it again.
    const std::string dir = state_dir + "/ssl";
    const std::string crt = dir + "/portal.crt";
    const std::string key = dir + "/portal.key";
    auto old_crt = env.files.ReadIfExists(crt);
    if (!old_crt) return Fail(old_crt.error());
    auto old_key = env.files.ReadIfExists(key);
    if (!old_key) return Fail(old_key.error());
    if (*old_crt && *old_key &&
        StillServes(CertificatePair{**old_crt, **old_key}, server_name, kRenewDays)) {
      pair = CertificatePair{**old_crt, **old_key};
    } else {
      std::vector<std::string> names = {server_name};
      if (!address.empty() && address != server_name) names.push_back(address);
      auto made = MakeSelfSigned(names);
      if (!made) return Fail(made.error());
      pair = std::move(*made);
      log::AddSecret(pair.key_pem);
      if (auto s = EnsureDirectory(env, dir, 0700, root, "the portal's self-signed certificate");
          !s) {
        return s;
      }
      // The key first: a crash in between leaves a pair that does not match, made again.
      const std::string why = fmt::format(
          "no certificate given ({}): a self-signed one for {}, kept for a replaced portal",
          kPortalCertChain, fmt::join(names, ", "));
      if (auto s = EnsureFile(env, key, pair.key_pem, 0600, root, why); !s) {
        return Fail(s.error());
      }
      if (auto s = EnsureFile(env, crt, pair.chain_pem, 0644, root, why); !s) {
        return Fail(s.error());
      }
    }
  }
  log::AddSecret(pair.key_pem);
  const std::string base = std::string(kOodSslDir) + "/" + server_name;
  if (auto s = EnsureFile(env, base + ".key", pair.key_pem, 0600, root,
                          "Apache's TLS key for " + server_name);
      !s) {
    return Fail(s.error());
  }
  if (auto s = EnsureFile(env, base + ".crt", pair.chain_pem, 0644, root,
                          "Apache's TLS certificate for " + server_name);
      !s) {
    return Fail(s.error());
  }
  return Ok();
}

}  // namespace onehpc::ood
