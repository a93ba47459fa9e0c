#include "roles/slurm/key_delivery.h"

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

#include "common/base64.h"
#include "common/log.h"
#include "context/context_file.h"
#include "context/onegate.h"
#include "roles/ensure.h"
#include "roles/host/address.h"
#include "roles/names.h"
#include "roles/role.h"

namespace onehpc::slurm {
namespace {

// The BLAKE2b key of MungeKeyId: separates this use of the hash from any other.
constexpr char kKeyIdDomain[] = "one-hpc munge key id, v1";

const unsigned char* Bytes(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}
unsigned char* Bytes(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A reason from the wire, made safe to log and to put in an error: printable ASCII, bounded.
std::string Printable(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 300)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

KeyAnswer Denied(const std::string& why) {
  return KeyAnswer{false, std::string(kKeyProtocol) + " DENIED " + why, "denied: " + why};
}

}  // namespace

Status InitCrypto() {
  if (sodium_init() < 0) return Fail(ErrorKind::kInternal, "libsodium cannot initialise");
  return Ok();
}

Result<BoxKeyPair> NewBoxKeyPair() {
  if (auto s = InitCrypto(); !s) return Fail(s.error());
  BoxKeyPair pair;
  pair.public_key.assign(crypto_box_PUBLICKEYBYTES, '\0');
  pair.secret_key.assign(crypto_box_SECRETKEYBYTES, '\0');
  if (crypto_box_keypair(Bytes(pair.public_key), Bytes(pair.secret_key)) != 0) {
    return Fail(ErrorKind::kInternal, "crypto_box_keypair failed");
  }
  return pair;
}

Result<std::optional<BoxKeyPair>> ReadBoxKeyPair(const Files& files, const std::string& path) {
  static_assert(crypto_box_PUBLICKEYBYTES == kBoxKeyBytes &&
                crypto_box_SECRETKEYBYTES == kBoxKeyBytes);
  if (auto s = InitCrypto(); !s) return Fail(s.error());
  auto existing = files.ReadIfExists(path);
  if (!existing) return Fail(existing.error());
  if (!existing->has_value()) return std::optional<BoxKeyPair>();
  const std::string& data = **existing;
  if (data.size() == 2 * kBoxKeyBytes) {
    BoxKeyPair pair{data.substr(kBoxKeyBytes), data.substr(0, kBoxKeyBytes)};
    std::string derived(kBoxKeyBytes, '\0');
    if (crypto_scalarmult_base(Bytes(derived), Bytes(pair.secret_key)) == 0 &&
        sodium_memcmp(derived.data(), pair.public_key.data(), kBoxKeyBytes) == 0) {
      log::AddSecret(Base64Encode(pair.secret_key));
      return std::optional<BoxKeyPair>(std::move(pair));
    }
  }
  return Fail(ErrorKind::kUnsafe,
              path + " is not a key pair one-hpc made (" + std::to_string(data.size()) +
                  " bytes, expected " + std::to_string(2 * kBoxKeyBytes) +
                  " whose second half is the public key of the first); move it away to "
                  "have a new pair made");
}

Result<BoxKeyPair> EnsureBoxKeyPair(RoleEnv& env, const std::string& path, const std::string& why) {
  auto existing = ReadBoxKeyPair(env.files, path);
  if (!existing) return Fail(existing.error());
  if (existing->has_value()) {
    const BoxKeyPair& pair = **existing;
    auto s = EnsureFile(env, path, pair.secret_key + pair.public_key, 0600,
                        FileOwner{"root", "root"}, why);
    if (!s) return Fail(s.error());
    return pair;
  }
  auto pair = NewBoxKeyPair();
  if (!pair) return Fail(pair.error());
  log::AddSecret(Base64Encode(pair->secret_key));
  auto s = env.plan.Do("make a key pair in " + path + " (0600 root)", why, [&] {
    return env.files.WriteAtomic(path, pair->secret_key + pair->public_key, 0600,
                                 FileOwner{"root", "root"});
  });
  if (!s) return Fail(s.error());
  return pair;
}

std::string KeyServerListenDropIn(const std::string& addr) {
  return "# one-hpc configure: workers ask for the munge key on the service network's address\n"
         "# only (" +
         addr +
         ", the address published in OneGate), not on every interface.\n"
         "[Socket]\n"
         "ListenStream=\n"
         "ListenStream=" +
         addr + ":" + std::to_string(kKeyServerPort) +
         "\n"
         "FreeBind=yes\n";
}

Result<BoxKeyPair> EnsureKeyServer(RoleEnv& env, const std::string& addr) {
  if (!host::ParseIpv4(addr)) {
    return Fail(
        ErrorKind::kInvalidInput,
        "the key server needs this VM's IPv4 address on the service network, got '" + addr + "'");
  }
  auto pair = EnsureBoxKeyPair(env, kKeyServerKeyPath,
                               "the key server boxes the munge key with it; workers check the "
                               "box against its public key in OneGate");
  if (!pair) return Fail(pair.error());
  if (env.onegate != nullptr) {
    const OneGateConfig& config = env.onegate->config();
    std::string text = "# one-hpc configure: what one-hpc key-serve reads of this VM's context\n" +
                       FormatContextAssignment("ONEGATE_ENDPOINT", config.endpoint) + "\n" +
                       FormatContextAssignment("VMID", config.vmid) + "\n" +
                       FormatContextAssignment("ONEGATE_TOKEN", config.token) + "\n";
    auto s = EnsureFile(env, kKeyServerContextPath, text, 0600, FileOwner{"root", "root"},
                        "key-serve reads OneGate's endpoint and this VM's token here, not from "
                        "the CONTEXT CD (no disk probe or CD mount per connection)");
    if (!s) return Fail(s.error());
  }
  auto dropin = EnsureFile(env, kKeyServerListenDropIn, KeyServerListenDropIn(addr), 0644,
                           std::nullopt, "the key server listens on " + addr + " only");
  if (!dropin) return Fail(dropin.error());
  if (auto s = DaemonReloadIf(env, *dropin, "the key server's socket changed"); !s) {
    return Fail(s.error());
  }
  if (auto s = EnsureUnitEnabled(
          env, kKeyServerSocket, "sockets.target",
          "workers fetch the munge key, boxed for them, on port " + std::to_string(kKeyServerPort));
      !s) {
    return Fail(s.error());
  }
  if (auto s =
          EnsureUnitRunning(env, kKeyServerSocket, *dropin,
                            "it listens on " + addr + ":" + std::to_string(kKeyServerPort) + " now",
                            "one one-hpc key-serve per connection");
      !s) {
    return Fail(s.error());
  }
  return pair;
}

std::string MungeKeyId(const std::string& munge_key) {
  return DomainHashHex(munge_key, kKeyIdDomain);
}

std::string DomainHashHex(std::string_view data, std::string_view domain) {
  (void)InitCrypto();
  unsigned char hash[16];
  crypto_generichash(hash, sizeof hash, reinterpret_cast<const unsigned char*>(data.data()),
                     data.size(), reinterpret_cast<const unsigned char*>(domain.data()),
                     domain.size());
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : hash) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

Result<std::string> DecodePublicKey(const std::string& text, const std::string& what) {
  auto key = Base64DecodeStrict(text);
  if (!key || key->size() != kBoxKeyBytes) {
    return Fail(ErrorKind::kInvalidInput, what + "='" + Printable(text) +
                                              "' is not the base64 of a " +
                                              std::to_string(kBoxKeyBytes) + "-byte public key");
  }
  return *key;
}

std::string FormatKeyRequest(const KeyRequest& request) {
  return std::string(kKeyProtocol) + " " + std::to_string(request.vm_id) + " " +
         Base64Encode(request.nonce);
}

Result<KeyRequest> ParseKeyRequest(const std::string& line) {
  auto words = Words(line);
  const std::string expected = std::string("'") + kKeyProtocol + " <VM id> <base64 nonce>'";
  if (words.size() != 3 || words[0] != kKeyProtocol) {
    return Fail(ErrorKind::kInvalidInput, "not a key request (expected " + expected + ")");
  }
  const std::string& id = words[1];
  if (id.empty() || id.size() > 9 || !std::all_of(id.begin(), id.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    return Fail(ErrorKind::kInvalidInput, "'" + Printable(id) + "' is not a VM id");
  }
  auto nonce = Base64DecodeStrict(words[2]);
  if (!nonce || nonce->size() != kBoxNonceBytes) {
    return Fail(ErrorKind::kInvalidInput,
                "the nonce is not the base64 of " + std::to_string(kBoxNonceBytes) + " bytes");
  }
  return KeyRequest{std::stoi(id), *nonce};
}

KeyAnswer DecideKeyRequest(OneGateClient& onegate, const KeyRequest& request,
                           const std::string& peer_ip, const std::string& worker_role,
                           const KeyServerSecrets& secrets) {
  const std::string vm = "VM " + std::to_string(request.vm_id);
  auto info = onegate.GetVmById(request.vm_id);
  if (info) return AnswerKeyRequest(request, peer_ip, *info, worker_role, secrets);
  const long status = onegate.last_failure().status;
  if (status == 400 || status == 404) {
    return Denied(vm + " is not a VM of this service (OneGate: HTTP " + std::to_string(status) +
                  ")");
  }
  return RetryAnswer("the controller cannot read " + vm +
                     " from OneGate now: " + info.error().message);
}

KeyAnswer RetryAnswer(const std::string& why) {
  return KeyAnswer{false, std::string(kKeyProtocol) + " RETRY " + why, "not now: " + why};
}

KeyAnswer AnswerKeyRequest(const KeyRequest& request, const std::string& peer_ip,
                           const VmInfo& info, const std::string& worker_role,
                           const KeyServerSecrets& secrets) {
  const std::string vm = "VM " + std::to_string(request.vm_id);
  if (info.id != request.vm_id) {
    return RetryAnswer("OneGate answered for VM " + std::to_string(info.id) + " instead of " + vm);
  }
  if (info.Attr("ROLE_NAME") != worker_role) {
    return Denied(vm + " is not a node of role '" + worker_role + "' (its ROLE_NAME is '" +
                  info.Attr("ROLE_NAME") + "')");
  }
  bool from_vm = std::any_of(info.nics.begin(), info.nics.end(), [&](const VmNic& nic) {
    return !nic.ip.empty() && nic.ip == peer_ip;
  });
  if (!from_vm) {
    return Denied("the request came from " + peer_ip + ", which is no address of " + vm);
  }
  std::string published = info.Attr(kAttrWorkerPublicKey);
  if (published.empty()) return Denied(vm + " publishes no " + std::string(kAttrWorkerPublicKey));
  auto worker_key = DecodePublicKey(published, std::string(kAttrWorkerPublicKey) + " of " + vm);
  if (!worker_key) return Denied(worker_key.error().message);
  if (auto s = InitCrypto(); !s) return RetryAnswer(s.error().message);
  std::string box(crypto_box_MACBYTES + secrets.munge_key.size(), '\0');
  if (crypto_box_easy(Bytes(box), Bytes(secrets.munge_key), secrets.munge_key.size(),
                      Bytes(request.nonce), Bytes(*worker_key),
                      Bytes(secrets.server.secret_key)) != 0) {
    return RetryAnswer("crypto_box_easy failed");
  }
  return KeyAnswer{true, std::string(kKeyProtocol) + " OK " + Base64Encode(box),
                   "sent the munge key, boxed for " + vm + "'s public key, to " + peer_ip};
}

Result<std::string> OpenKeyAnswer(const std::string& line, const KeyRequest& request,
                                  const BoxKeyPair& worker, const std::string& server_public_key,
                                  const std::string& expected_key_id) {
  auto words = Words(line);
  if (words.size() < 2 || words[0] != kKeyProtocol) {
    return Fail(ErrorKind::kNetwork, "the key server's answer is not " + std::string(kKeyProtocol));
  }
  std::string rest;
  for (size_t i = 2; i < words.size(); ++i) rest += (rest.empty() ? "" : " ") + words[i];
  if (words[1] == "RETRY")
    return Fail(ErrorKind::kNetwork, "the key server says: " + Printable(rest));
  if (words[1] == "DENIED") {
    return Fail(ErrorKind::kInvalidInput, "the key server refused: " + Printable(rest));
  }
  if (words[1] != "OK" || words.size() != 3) {
    return Fail(ErrorKind::kNetwork, "the key server's answer is malformed");
  }
  auto box = Base64DecodeStrict(words[2]);
  if (!box || box->size() <= crypto_box_MACBYTES) {
    return Fail(ErrorKind::kInvalidInput, "the key server's box is not base64 or too short");
  }
  if (auto s = InitCrypto(); !s) return Fail(s.error());
  std::string key(box->size() - crypto_box_MACBYTES, '\0');
  if (crypto_box_open_easy(Bytes(key), Bytes(*box), box->size(), Bytes(request.nonce),
                           Bytes(server_public_key), Bytes(worker.secret_key)) != 0) {
    return Fail(ErrorKind::kInvalidInput,
                "the key server's box does not open with the public key the controller "
                "publishes and this VM's secret key (an impostor, or a key pair changed)");
  }
  if (MungeKeyId(key) != expected_key_id) {
    // The box proves the controller made it: its key is newer (or older) than the id read from
    // OneGate, as while a rotation is under way. Asking again, against the id published then,
    // settles it; a key that never matches fails at the join's deadline.
    return Fail(ErrorKind::kNetwork, "the munge key from the key server is not the one whose id " +
                                         expected_key_id + " the controller publishes");
  }
  log::AddSecret(Base64Encode(key));
  return key;
}

}  // namespace onehpc::slurm
