// The NFS client side of the Open OnDemand portal and worker roles: a generated systemd mount
// unit per share (systemd.mount(5)), started and waited for with a deadline, the local address
// the kernel uses to reach the server, and the proof that root can write to the share (the
// portal creates home directories as root, so the server must not squash it).
//
//   /etc/systemd/system/home.mount   What=10.0.1.5:/export/home  Where=/home  Type=nfs4
//                                    Options=_netdev,hard,noatime,nosuid,nodev
//                                    WantedBy=remote-fs.target
//
// `hard`: a short server pause blocks I/O and resumes it, instead of failing writes (slurmctld
// keeps its state on such a share). The lab cannot run kernel NFS in containers and replaces
// the transport with a drop-in `<unit>.d/lab-bind.conf` (What=/lab/nfs/home, Type=none,
// Options=bind): this module never writes or deletes anything in `<unit>.d/`, and once the
// unit is active it accepts whatever source is mounted at Where=.
#ifndef ONEHPC_ROLES_NFS_CLIENT_MOUNTS_H_
#define ONEHPC_ROLES_NFS_CLIENT_MOUNTS_H_

#include <deque>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "roles/os/process.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::nfs {

/// nosuid,nodev: the portal writes the homes as root (no_root_squash), so a setuid-root program
/// or a device file planted there by the portal's or the storage VM's root must not work on a
/// worker.
inline constexpr char kNfsMountOptions[] = "_netdev,hard,noatime,nosuid,nodev";
/// TimeoutSec= of the generated units: how long systemd lets mount.nfs try at boot.
inline constexpr int kNfsMountUnitTimeoutSec = 90;
/// The probe file of CheckRootCanWrite: <where>/.one-hpc-root-probe.<pid>.
inline constexpr char kRootProbePrefix[] = ".one-hpc-root-probe.";

struct NfsMount {
  std::string server;       ///< IPv4 address or DNS name (validated)
  std::string export_path;  ///< absolute path on the server, e.g. /export/home
  std::string where;        ///< local mount point, absolute and normalised, e.g. /home
  std::string why;          ///< for the plan, the log and the unit's Description
  std::string setting;      ///< the ONEAPP_* variable server/export came from (error messages)
  /// Why root must write there, ending CheckRootCanWrite's error ("" = not said), e.g.
  /// "the portal creates home directories as root".
  std::string root_write_why;

  /// "server:/export" (What= of the unit).
  std::string What() const { return server + ":" + export_path; }
};

/// kInvalidInput naming m.setting, the value and what was expected, unless: the server is a
/// dotted-quad IPv4 address or a DNS name (labels of letters, digits and '-', a last label
/// that is not all digits); the export and the mount point are absolute paths without "..",
/// "//", a trailing '/', whitespace, control characters, '\' or '%'; the mount point is not
/// "/"; `why` is a single line.
Status ValidateNfsMount(const NfsMount& m);

/// The unit systemd requires for `where` (one escaping: disk::MountUnitName): "/home" ->
/// "home.mount", "/var/lib/one-hpc/portal-state" -> "var-lib-one\x2dhpc-portal\x2dstate.mount".
std::string NfsMountUnitName(const std::string& where);

/// The unit's text (m must be valid): [Unit] Description (m.why, '%' doubled),
/// After=/Wants=network-online.target; [Mount] What=server:/export, Where=, Type=nfs4,
/// Options=_netdev,hard,noatime,nosuid,nodev, TimeoutSec=90s; [Install] WantedBy=remote-fs.target.
std::string RenderNfsMountUnit(const NfsMount& m);

/// Makes `m.where` an NFS mount, through env.plan:
///  1. validates m (nothing changes on a bad value);
///  2. creates the mount point (0755) when missing;
///  3. writes /etc/systemd/system/<unit> when it differs (EnsureFile) and then daemon-reloads;
///  4. enables the unit (link in remote-fs.target.wants) unless it is;
///  5. starts it (--no-block) when nothing is mounted at `where`; restarts it when the unit
///     changed and `where` is mounted from another source than server:/export; otherwise
///     keeps the mount (any source: the lab's bind drop-in is accepted);
///  6. after a start or restart, polls (Retry: backoff with jitter, at most `mount_timeout`)
///     until the unit is active and env.mounts reports a mount at `where` (any source).
/// A second run with the same m writes nothing and starts nothing. In a dry run nothing is
/// waited for. On timeout: kNetwork naming server:/export, `where`, the unit's last state and
/// `journalctl -u <unit>`. Errors of systemctl or of reading the mount table are returned as
/// they are.
Status EnsureNfsMount(RoleEnv& env, const NfsMount& m, Duration mount_timeout);

/// `server` itself when it is an IPv4 address, else its first IPv4 address from getaddrinfo
/// (AF_INET only: IPv6 servers are not supported). kInvalidInput for anything else, kNetwork
/// when the name does not resolve.
Result<std::string> ResolveIpv4(const std::string& server);

/// The "prefsrc" of the first route in `ip -j route get` output, e.g.
/// [{"dst":"10.0.1.5","dev":"eth1","prefsrc":"10.0.1.23",...}]. kProcess naming `server_ip`
/// and quoting the output when it is not that JSON or holds no IPv4 prefsrc.
Result<std::string> ParseRouteGetJson(const std::string& json, const std::string& server_ip);

/// The local address the kernel uses to reach `server` (an IPv4 address, or a DNS name
/// resolved with ResolveIpv4): `ip -j route get <ip>` (argv, 10 s timeout), parsed with
/// ParseRouteGetJson. kProcess with ip's stderr when there is no route.
Result<std::string> SourceAddressFor(ProcessRunner& runner, const std::string& server);

/// The seam of CheckRootCanWrite: one attempt to create a file and remove it again.
class WriteProbe {
 public:
  struct Outcome {
    int error = 0;     ///< 0 on success, else the errno of the failed step
    std::string step;  ///< "create" or "remove" (the failed step)
  };
  virtual ~WriteProbe() = default;
  /// open(path, O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0600), close, unlink.
  virtual Outcome CreateAndRemove(const std::string& path) = 0;
};

/// The real system calls. An EEXIST (a probe left by a killed run with the same pid) removes
/// the stale probe and reports EEXIST, so that the next attempt starts clean.
class RealWriteProbe : public WriteProbe {
 public:
  Outcome CreateAndRemove(const std::string& path) override;
};

/// Proves that root can create and remove a file in m.where (mounted): the probe
/// <where>/.one-hpc-root-probe.<pid> through `probe`, retried on every error with backoff
/// and jitter until `deadline` (the share may still be settling). On EACCES, EPERM or EROFS
/// at the deadline: kInvalidInput with the action for the server's administrator, e.g.
///   root cannot write to /home, mounted from 10.0.1.5:/export/home (ONEAPP_HOME_NFS_SERVER):
///   the NFS server must export /export/home with no_root_squash to 10.0.1.23, the address
///   this VM uses to reach 10.0.1.5 (ip route get 10.0.1.5); the portal creates home
///   directories as root (create /home/.one-hpc-root-probe.42: Permission denied (EACCES);
///   38 attempts in 176.3 s)
/// (the address from SourceAddressFor through env.runner; when that fails the message says so
/// with its reason; EROFS asks for a read-write export). Other errors: kIo with the errno. In
/// a dry run nothing is created (a keep is recorded); success is recorded as a keep.
Status CheckRootCanWrite(RoleEnv& env, const NfsMount& m, Duration deadline, WriteProbe& probe);
/// The same with RealWriteProbe.
Status CheckRootCanWrite(RoleEnv& env, const NfsMount& m, Duration deadline);

}  // namespace onehpc::nfs

#endif  // ONEHPC_ROLES_NFS_CLIENT_MOUNTS_H_
