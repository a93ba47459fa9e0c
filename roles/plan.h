// The ordered list of actions a configure run takes, with the reason for each. `one-hpc plan`
// and `one-hpc configure` run the same role code: in a dry run, Plan::Do records the action
// instead of performing it, so the printed plan is exactly the decisions configure makes.
#ifndef ONEHPC_ROLES_PLAN_H_
#define ONEHPC_ROLES_PLAN_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace onehpc {

enum class PlanMode { kApply, kDryRun };

struct PlannedAction {
  enum class Outcome { kPlanned, kDone, kFailed, kKept };
  std::string what;  ///< "write /etc/slurm/slurm.conf"
  std::string why;   ///< "content differs (MaxNodeCount 100 -> 3)"
  Outcome outcome = Outcome::kPlanned;
};

class Plan {
 public:
  explicit Plan(PlanMode mode) : mode_(mode) {}
  bool dry_run() const { return mode_ == PlanMode::kDryRun; }
  /// Keeps are logged at debug level instead of info (a timer's pass that changes nothing
  /// must not fill the journal every 30 s).
  void set_quiet_keeps(bool quiet) { quiet_keeps_ = quiet; }

  /// Does `what` because `why`. Apply mode: runs `fn` inside a log::Op and records the
  /// outcome; the error gets `what` as context. Dry run: records the action, returns Ok.
  Status Do(const std::string& what, const std::string& why, const std::function<Status()>& fn);
  /// Records a decision to leave something as it is (logged at info in apply mode).
  void Keep(const std::string& what, const std::string& why);

  const std::vector<PlannedAction>& actions() const { return actions_; }
  /// A point in the plan, for ChangedSince.
  size_t Mark() const { return actions_.size(); }
  /// Whether an action after `mark` changed something (or, in a dry run, would): what a
  /// daemon serves changed, so it must be restarted.
  bool ChangedSince(size_t mark) const;
  /// Numbered, human-readable list: "1. write /etc/hosts\n   because: ...".
  std::string Render() const;

 private:
  PlanMode mode_;
  bool quiet_keeps_ = false;
  std::vector<PlannedAction> actions_;
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_PLAN_H_
