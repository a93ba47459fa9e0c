#include "roles/plan.h"

#include "common/log.h"

namespace onehpc {

Status Plan::Do(const std::string& what, const std::string& why,
                const std::function<Status()>& fn) {
  PlannedAction action{what, why, PlannedAction::Outcome::kPlanned};
  if (dry_run()) {
    actions_.push_back(std::move(action));
    return Ok();
  }
  log::Op op(what + " (" + why + ")");
  Status status = fn();
  if (status) {
    op.Finished();
    action.outcome = PlannedAction::Outcome::kDone;
    actions_.push_back(std::move(action));
    return status;
  }
  op.Failed(status.error());
  action.outcome = PlannedAction::Outcome::kFailed;
  actions_.push_back(std::move(action));
  return Fail(status.error().WithContext(what));
}

void Plan::Keep(const std::string& what, const std::string& why) {
  if (dry_run()) {
  } else if (quiet_keeps_) {
    log::Debug("keep: {} ({})", what, why);
  } else {
    log::Info("keep: {} ({})", what, why);
  }
  actions_.push_back({what, why, PlannedAction::Outcome::kKept});
}

bool Plan::ChangedSince(size_t mark) const {
  for (size_t i = mark; i < actions_.size(); ++i) {
    if (actions_[i].outcome != PlannedAction::Outcome::kKept) return true;
  }
  return false;
}

std::string Plan::Render() const {
  std::string out;
  int n = 0;
  for (const auto& a : actions_) {
    ++n;
    const char* verb = "";
    switch (a.outcome) {
      case PlannedAction::Outcome::kPlanned:
        verb = "";
        break;
      case PlannedAction::Outcome::kDone:
        verb = " [done]";
        break;
      case PlannedAction::Outcome::kFailed:
        verb = " [FAILED]";
        break;
      case PlannedAction::Outcome::kKept:
        verb = " [keep]";
        break;
    }
    out += std::to_string(n) + ". " + a.what + verb + "\n";
    out += "   because: " + a.why + "\n";
  }
  if (actions_.empty()) out = "(nothing to do)\n";
  return out;
}

}  // namespace onehpc
