#include "roles/published.h"

#include <set>
#include <sstream>

#include "common/log.h"
#include "roles/names.h"
#include "roles/role_change.h"

namespace onehpc {
namespace {

struct Record {
  std::set<std::string> names;
  bool exists = false;
};

// The names recorded. Without the file: nothing on a VM no configure has succeeded on yet (a
// first boot), else what configure erases (an older one-hpc published without the record).
Result<Record> ReadRecord(const Files& files) {
  auto text = files.ReadIfExists(kPublishedFile);
  if (!text) return Fail(text.error());
  Record record;
  if (text->has_value()) {
    record.exists = true;
    std::istringstream in(**text);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) record.names.insert(line);
    }
    return record;
  }
  auto configured = files.ReadIfExists(kRoleRecordFile);
  if (!configured || configured->has_value()) record.names = {kAttrReady, "ERROR"};
  return record;
}

// The record is changed by configure and by the elastic cycle, which can run at once: each
// change (read, then write) holds this lock, so that neither loses the other's name.
constexpr char kRecordLock[] = "/run/one-hpc/onegate-published.lock";

// Adds (`add`) or drops `attr`, under the lock.
Status ChangeRecord(Files& files, const std::string& attr, bool add) {
  auto lock = files.Lock(kRecordLock, /*wait=*/true);
  if (!lock) return Fail(lock.error());
  auto record = ReadRecord(files);
  if (!record) return Fail(record.error());
  if (record->exists && (record->names.count(attr) > 0) == add) return Ok();
  if (add) {
    record->names.insert(attr);
  } else {
    record->names.erase(attr);
  }
  std::string text;
  for (const auto& n : record->names) text += n + "\n";
  return files.WriteAtomic(kPublishedFile, text, 0644);
}

}  // namespace

bool MayBePublished(const Files& files, const std::string& attr) {
  auto record = ReadRecord(files);
  return !record || record->names.count(attr) > 0;
}

Status RecordPublished(Files& files, const std::string& attr) {
  return ChangeRecord(files, attr, /*add=*/true);
}

Status RecordErased(Files& files, const std::string& attr) {
  return ChangeRecord(files, attr, /*add=*/false);
}

Status PublishRecorded(OneGateClient& onegate, Files& files, const std::string& attr,
                       const std::string& value) {
  if (Status r = RecordPublished(files, attr); !r) {
    log::Warn("could not record {} in {}: {}", attr, kPublishedFile, r.error().message);
  }
  return onegate.UpdateVm({{attr, value}});
}

Status EraseRecorded(OneGateClient& onegate, Files& files, const std::string& attr) {
  Status erased = onegate.EraseVmAttribute(attr);
  if (!erased) return erased;
  if (Status r = RecordErased(files, attr); !r) {
    log::Warn("could not record in {} that {} is erased: {}", kPublishedFile, attr,
              r.error().message);
  }
  return Ok();
}

void EraseStaleReady(OneGateClient& onegate, Files& files) {
  if (!MayBePublished(files, kAttrReady)) return;
  if (Status erased = EraseRecorded(onegate, files, kAttrReady); !erased) {
    log::Warn("could not erase a stale READY: {}", erased.error().message);
  }
}

void PublishError(OneGateClient& onegate, Files& files, const std::string& message) {
  if (Status published = PublishRecorded(onegate, files, "ERROR", message); !published) {
    log::Warn("could not publish ERROR: {}", published.error().message);
  }
}

Status ReportSuccess(OneGateClient& onegate, Files& files, Plan& plan,
                     const std::vector<std::pair<std::string, std::string>>& publish,
                     const std::string& why) {
  if (MayBePublished(files, "ERROR")) {
    Status erased = plan.Do("erase ERROR through OneGate", "the configure succeeded",
                            [&]() { return EraseRecorded(onegate, files, "ERROR"); });
    if (!erased) log::Warn("{}", erased.error().message);
  }
  if (publish.empty()) return Ok();
  std::string keys;
  bool ready = false;
  for (const auto& [key, value] : publish) {
    keys += (keys.empty() ? "" : ", ") + key;
    ready = ready || key == kAttrReady;
  }
  if (ready && !plan.dry_run()) {
    if (Status r = RecordPublished(files, kAttrReady); !r) {
      return Fail(r.error().WithContext("recording READY in " + std::string(kPublishedFile)));
    }
  }
  return plan.Do("publish " + keys + " through OneGate", why,
                 [&]() { return onegate.UpdateVm(publish); });
}

}  // namespace onehpc
