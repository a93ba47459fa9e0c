// What this VM may have left in its OneGate user template. READY and ERROR stay there across
// reboots until erased; erasing one the VM does not have costs a request that OneGate answers
// with an error (two of a first join's requests, before this record). one-hpc writes an
// attribute's name into kPublishedFile before it publishes it, and drops it once it is erased,
// so that configure erases only what may be there.
#ifndef ONEHPC_ROLES_PUBLISHED_H_
#define ONEHPC_ROLES_PUBLISHED_H_

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "context/onegate.h"
#include "roles/os/files.h"
#include "roles/plan.h"

namespace onehpc {

inline constexpr char kPublishedFile[] = "/var/lib/one-hpc/onegate-published";

/// Whether `attr` may be in this VM's user template: listed in kPublishedFile. Without the
/// file, false only on a VM where no configure has succeeded yet (no kRoleRecordFile: a first
/// boot): a VM an older one-hpc configured published without the record. Unreadable: true.
bool MayBePublished(const Files& files, const std::string& attr);

/// Adds `attr` to the record; called before it is published.
Status RecordPublished(Files& files, const std::string& attr);

/// Drops `attr` from the record (writing the file when there was none); called once erased.
Status RecordErased(Files& files, const std::string& attr);

/// Records `attr`, then publishes it as `value`; the publication's status (a failure to record
/// is logged: what must be seen is published anyway).
Status PublishRecorded(OneGateClient& onegate, Files& files, const std::string& attr,
                       const std::string& value);
/// Erases `attr`, then drops it from the record (a failure to record that is logged).
Status EraseRecorded(OneGateClient& onegate, Files& files, const std::string& attr);

/// Configure's start: erases a READY an earlier boot may have left (it would tell OneFlow and
/// the peers that this VM is ready while it is configured). Trouble is logged, never fatal.
void EraseStaleReady(OneGateClient& onegate, Files& files);

/// Configure's failure: records ERROR, then publishes `message` (already OneGate-safe) as
/// ERROR; published even when the record fails (the operator must see the failure).
void PublishError(OneGateClient& onegate, Files& files, const std::string& message);

/// Configure's success, through `plan`: ERROR erased when it may be there (first, so that
/// READY=YES and a stale ERROR are never seen together), READY recorded when `publish` carries
/// it (a failure to record it fails: the next boot would not erase it), then `publish` in one
/// request. `why` says why they are published.
Status ReportSuccess(OneGateClient& onegate, Files& files, Plan& plan,
                     const std::vector<std::pair<std::string, std::string>>& publish,
                     const std::string& why);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_PUBLISHED_H_
