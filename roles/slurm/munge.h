// The munge key: generated once on the controller and kept across reboots; installed on
// workers from OneGate. Keys never appear on a command line or in a log line.
#ifndef ONEHPC_ROLES_SLURM_MUNGE_H_
#define ONEHPC_ROLES_SLURM_MUNGE_H_

#include <string>

#include "common/error.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::slurm {

inline constexpr size_t kMungeKeyBytes = 128;    ///< what `mungekey` creates by default
inline constexpr size_t kMungeKeyMinBytes = 32;  ///< munged refuses shorter keys
inline constexpr size_t kMungeKeyMaxBytes = 1024 * 1024;

/// Random bytes from getrandom(2).
Result<std::string> RandomBytes(size_t n);

/// kInvalidInput when a key is too short or too long for munged (never quotes the key).
Status CheckMungeKey(const std::string& key);

/// What EnsureControllerMungeKey / InstallMungeKey did.
struct MungeKeyState {
  std::string key;       ///< the key bytes ("" in a dry run when a new key would be made)
  bool changed = false;  ///< the key file content changes (munged must restart)
};

/// Controller: keeps /etc/munge/munge.key when one-hpc generated it (marker file present);
/// otherwise (first boot, or a key baked into the image) saves any old key to
/// munge.key.before-one-hpc and writes a new random key (0400, munge:munge, atomically),
/// then the marker. Registers the key's base64 as a log secret.
Result<MungeKeyState> EnsureControllerMungeKey(RoleEnv& env);

/// Worker: writes `key` to /etc/munge/munge.key (0400, munge:munge) unless identical.
Result<MungeKeyState> InstallMungeKey(RoleEnv& env, const std::string& key);

/// Portal: the key lives on the shared state export at `shared_path`: created there once
/// (0400 root, atomically), then installed to /etc/munge/munge.key on every configure, so a
/// rebooted or replaced portal keeps the cluster's key. An unusable key there is kUnsafe
/// (never replaced automatically).
Result<MungeKeyState> EnsureSharedMungeKey(RoleEnv& env, const std::string& shared_path);

/// Rotation: a new random key, written atomically where the cluster keeps it (`shared_path`
/// first when it is not "", then /etc/munge/munge.key, 0400 munge:munge). Old credentials stop
/// working as soon as munged restarts with it.
Result<MungeKeyState> WriteNewMungeKey(RoleEnv& env, const std::string& shared_path);

/// munge.service enabled and running; restarted (--no-block, then waited for) when `changed`;
/// in apply mode checked with `munge -n` piped (through memory) into `unmunge`.
Status EnsureMungeRunning(RoleEnv& env, bool changed);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_MUNGE_H_
