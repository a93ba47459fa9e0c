// Retries with exponential backoff, jitter, a cap and an overall deadline.
#ifndef ONEHPC_COMMON_RETRY_H_
#define ONEHPC_COMMON_RETRY_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "common/clock.h"
#include "common/error.h"

namespace onehpc {

/// How to retry: the first delay, its growth, its cap, and two limits (attempts, deadline).
struct RetryPolicy {
  Duration initial_delay{500};
  double multiplier = 2.0;
  Duration max_delay{10000};
  int max_attempts = 10;     ///< total attempts including the first; <= 0 means unlimited
  Duration deadline{60000};  ///< overall budget from the first attempt; <= 0 means none
  double jitter = 0.2;       ///< each delay is scaled by a factor in [1-jitter, 1+jitter]

  /// Polling until a deadline: unlimited attempts, delays growing by 1.6 from `initial` up
  /// to `max` (waiting for a daemon, a mount, a peer).
  static RetryPolicy Until(Duration deadline, Duration initial = Duration(500),
                           Duration max = Duration(5000), double jitter = 0.2) {
    RetryPolicy p;
    p.initial_delay = initial;
    p.multiplier = 1.6;
    p.max_delay = max;
    p.max_attempts = 0;
    p.deadline = deadline;
    p.jitter = jitter;
    return p;
  }

  /// No retries at all: one attempt.
  static RetryPolicy Once() {
    RetryPolicy p;
    p.max_attempts = 1;
    return p;
  }
};

/// Decides whether an error is worth another attempt.
using RetryPredicate = std::function<bool(const Error&)>;

/// Computes successive delays for a policy; deterministic for a given seed.
class Backoff {
 public:
  Backoff(const RetryPolicy& policy, std::uint64_t seed);
  /// The delay before the next attempt (grows each call).
  Duration Next();

 private:
  RetryPolicy policy_;
  double base_ms_;
  std::mt19937_64 rng_;
};

/// Runs `attempt` until it succeeds, the predicate says stop, attempts run out, or the next
/// sleep would pass the deadline. `what` names the operation in log lines.
template <typename T>
Result<T> Retry(const RetryPolicy& policy, Clock& clock, const std::string& what,
                const RetryPredicate& retryable, const std::function<Result<T>()>& attempt,
                std::uint64_t seed = std::random_device{}());

void LogRetry(const std::string& what, int attempt, const Error& error, Duration delay);

template <typename T>
Result<T> Retry(const RetryPolicy& policy, Clock& clock, const std::string& what,
                const RetryPredicate& retryable, const std::function<Result<T>()>& attempt,
                std::uint64_t seed) {
  Backoff backoff(policy, seed);
  const TimePoint start = clock.Now();
  for (int n = 1;; ++n) {
    Result<T> result = attempt();
    if (result) return result;
    if (!retryable(result.error())) return result;
    if (policy.max_attempts > 0 && n >= policy.max_attempts) {
      return Fail(
          result.error().WithContext(what + ": gave up after " + std::to_string(n) + " attempts"));
    }
    Duration delay = backoff.Next();
    if (policy.deadline.count() > 0) {
      auto elapsed = std::chrono::duration_cast<Duration>(clock.Now() - start);
      if (elapsed + delay >= policy.deadline) {
        return Fail(result.error().WithContext(what + ": gave up at the deadline of " +
                                               std::to_string(policy.deadline.count()) +
                                               " ms after " + std::to_string(n) + " attempts"));
      }
    }
    LogRetry(what, n, result.error(), delay);
    clock.SleepFor(delay);
  }
}

}  // namespace onehpc

#endif  // ONEHPC_COMMON_RETRY_H_
