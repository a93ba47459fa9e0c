// The munge key's delivery to workers, never in the clear (libsodium crypto_box, X25519 +
// XSalsa20-Poly1305).
//
// The controller (OneSlurm) or portal (Open OnDemand) has a box key pair and publishes its
// public key and the munge key's id (a keyed BLAKE2b hash: it identifies the key, it does not
// reveal it) in OneGate. Each worker has its own box key pair and publishes its public key.
// A worker whose munge key differs from the published id asks the controller's key server
// (TCP port kKeyServerPort) with one line: its VM id and a fresh random nonce. The server looks
// the VM up in the service document it reads from OneGate with its own token: the VM must be a
// node of the worker role, the connection must come from one of that VM's addresses, and the
// box is made for the public key that VM publishes (never for one the request names). The
// answer is crypto_box(munge key, nonce, worker public key, server secret key): only that
// worker can open it, it proves the controller made it, and the worker's nonce makes a
// recorded answer useless later.
#ifndef ONEHPC_ROLES_SLURM_KEY_DELIVERY_H_
#define ONEHPC_ROLES_SLURM_KEY_DELIVERY_H_

#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/error.h"
#include "context/onegate.h"
#include "context/onegate_json.h"
#include "roles/os/files.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::slurm {

/// The key server's TCP port (Slurm uses 6817-6819, slurmrestd often 6820).
inline constexpr int kKeyServerPort = 6830;
/// Bytes of a box public or secret key, and of a nonce.
inline constexpr size_t kBoxKeyBytes = 32;
inline constexpr size_t kBoxNonceBytes = 24;
/// The longest request or answer line accepted (the answer carries a base64 box).
inline constexpr size_t kMaxKeyLine = 4096;
/// Every answer and request begins with this word.
inline constexpr char kKeyProtocol[] = "ONEHPC-MUNGE/1";

/// A box key pair. `secret_key` is a secret (never logged).
struct BoxKeyPair {
  std::string public_key;
  std::string secret_key;
};

/// Makes libsodium usable (idempotent). kInternal when it cannot initialise.
Status InitCrypto();

/// A new key pair from the kernel's random source.
Result<BoxKeyPair> NewBoxKeyPair();

/// The key pair stored at `path` (secret key then public key, 64 bytes): nullopt when the file
/// is missing, kUnsafe when it is not a pair (another size, or a public key that does not
/// belong to the secret key).
Result<std::optional<BoxKeyPair>> ReadBoxKeyPair(const Files& files, const std::string& path);

/// The key pair stored at `path` (secret key then public key, 64 bytes, 0600 root): made
/// once, then read at every run. A file of another shape, or whose public key does not belong
/// to its secret key, is kUnsafe (never replaced automatically). In a dry run a missing file
/// gives a pair that is not written.
Result<BoxKeyPair> EnsureBoxKeyPair(RoleEnv& env, const std::string& path, const std::string& why);

/// The key server of a controller or portal, as configure leaves it:
/// - its box key pair (EnsureBoxKeyPair);
/// - kKeyServerContextPath (root 0600), this VM's OneGate endpoint, id and token for
///   `one-hpc key-serve`, which then never probes the disks or mounts the CD per connection
///   (only when this VM has OneGate: without it key-serve answers RETRY);
/// - the socket's drop-in (kKeyServerListenDropIn): it listens on `addr`, the service
///   network's address workers are told, and on no other (FreeBind: bound at boot before the
///   address is configured);
/// - the socket enabled and running, restarted when its drop-in changed.
/// Returns the pair.
Result<BoxKeyPair> EnsureKeyServer(RoleEnv& env, const std::string& addr);

/// The socket's drop-in for `addr` (ListenStream= reset, then addr:kKeyServerPort).
std::string KeyServerListenDropIn(const std::string& addr);

/// 32 lower-case hex digits of a 16-byte BLAKE2b hash of `data` keyed with `domain` (which
/// separates one use of the hash from another): MungeKeyId, SlurmConfId.
std::string DomainHashHex(std::string_view data, std::string_view domain);

/// The munge key's published id: 32 hex digits of a keyed BLAKE2b-128 hash of the key.
std::string MungeKeyId(const std::string& munge_key);

/// kInvalidInput unless `text` is strict base64 of a 32-byte public key; names `what`.
Result<std::string> DecodePublicKey(const std::string& text, const std::string& what);

/// What a worker sends: its VM id and a nonce it made for this request.
struct KeyRequest {
  int vm_id = -1;
  std::string nonce;  ///< kBoxNonceBytes random bytes
};

std::string FormatKeyRequest(const KeyRequest& request);
/// kInvalidInput for anything but "ONEHPC-MUNGE/1 <vm id> <base64 nonce>".
Result<KeyRequest> ParseKeyRequest(const std::string& line);

/// What the server holds while it answers (all secrets).
struct KeyServerSecrets {
  std::string munge_key;
  BoxKeyPair server;
};

/// How a request ended on the server.
struct KeyAnswer {
  bool granted = false;
  /// The line to send back: "ONEHPC-MUNGE/1 OK <base64 box>", or "ONEHPC-MUNGE/1 DENIED <why>"
  /// (a refusal that will not change by asking again) or "ONEHPC-MUNGE/1 RETRY <why>".
  std::string line;
  std::string log;  ///< what the server logs (never a secret)
};

/// Decides one request from the requesting VM as OneGate shows it to the server (GET /vms/<id>
/// with the server's own token: OneGate answers only for a VM of the server's own service,
/// and ROLE_NAME cannot be changed through OneGate): the VM's ROLE_NAME must be `worker_role`,
/// the peer address one of its NICs' IPs, its USER_TEMPLATE must publish kAttrWorkerPublicKey.
KeyAnswer AnswerKeyRequest(const KeyRequest& request, const std::string& peer_ip, const VmInfo& vm,
                           const std::string& worker_role, const KeyServerSecrets& secrets);

/// Reads the requesting VM with `onegate` (the server's own client: one GET /vms/<id>) and
/// decides with AnswerKeyRequest; OneGate not showing the VM is DENIED for HTTP 400 or 404
/// (not a VM of this service, or gone) and RETRY for anything else (no answer, 5xx).
KeyAnswer DecideKeyRequest(OneGateClient& onegate, const KeyRequest& request,
                           const std::string& peer_ip, const std::string& worker_role,
                           const KeyServerSecrets& secrets);

/// The answer for a request that cannot be decided now (OneGate down, no key yet).
KeyAnswer RetryAnswer(const std::string& why);

/// What the worker makes of the answer line: the munge key, after opening the box with the
/// server's published public key and checking the key against the published id. kNetwork for
/// RETRY and for a key whose id is not `expected_key_id` (a rotation under way: read the
/// published id again and ask again), kInvalidInput for DENIED or a box that does not open
/// (never retried).
Result<std::string> OpenKeyAnswer(const std::string& line, const KeyRequest& request,
                                  const BoxKeyPair& worker, const std::string& server_public_key,
                                  const std::string& expected_key_id);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_KEY_DELIVERY_H_
