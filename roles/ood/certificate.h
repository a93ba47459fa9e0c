// The portal's TLS certificate: the operator's (checked) or a self-signed one made once and
// kept on the state export, so that a replaced portal presents the same certificate.
#ifndef ONEHPC_ROLES_OOD_CERTIFICATE_H_
#define ONEHPC_ROLES_OOD_CERTIFICATE_H_

#include <string>
#include <vector>

#include "common/error.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::ood {

/// A certificate chain (leaf first) and its private key, both PEM.
struct CertificatePair {
  std::string chain_pem;
  std::string key_pem;  ///< secret: never logged
};

/// Checks an operator's pair: the chain parses (leaf first), the key parses unencrypted and
/// is the leaf's, the leaf covers `server_name` (a DNS name, or an IPv4 address in the
/// subjectAltName) and has not expired. Returns the pair re-encoded (PEM, nothing else).
/// Errors (kInvalidInput) name `chain_setting` or `key_setting`, never the key.
Result<CertificatePair> CheckCertificate(const std::string& chain_pem, const std::string& key_pem,
                                         const std::string& server_name,
                                         const std::string& chain_setting,
                                         const std::string& key_setting);

/// A new self-signed pair (ECDSA P-256, SHA-256, 825 days) for `names` (DNS names or IPv4
/// addresses, all in the subjectAltName; the first is the subject's CN).
Result<CertificatePair> MakeSelfSigned(const std::vector<std::string>& names);

/// True when `pair` is usable as it is for `server_name`: it parses, the key is the leaf's,
/// the leaf covers the name and stays valid for at least `min_days` more days.
bool StillServes(const CertificatePair& pair, const std::string& server_name, int min_days);

/// The operator's pair on the state export, `state_dir`/ssl/: the key stays on the portal and
/// the storage VM, never in the CONTEXT that every VM of the service reads.
inline constexpr char kSiteCertFile[] = "site.crt";
inline constexpr char kSiteKeyFile[] = "site.key";

/// Installs the portal's certificate as /etc/ood/ssl/<server_name>.crt (0644) and .key
/// (0600): the operator's pair from `state_dir`/ssl/site.crt and site.key (the key root's,
/// 0600) when they are there, else from ONEAPP_PORTAL_CERTIFICATE_CHAIN/_KEY when given (both
/// ways at once is an error), else the self-signed pair under `state_dir`/ssl (made once for
/// the server name and `address`, made again only when it no longer covers the server name or
/// is about to expire).
Status EnsurePortalCertificate(RoleEnv& env, const std::string& server_name,
                               const std::string& address, const std::string& state_dir);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_CERTIFICATE_H_
