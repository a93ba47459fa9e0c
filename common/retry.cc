#include "common/retry.h"

#include <algorithm>

#include "common/log.h"

namespace onehpc {

Backoff::Backoff(const RetryPolicy& policy, std::uint64_t seed)
    : policy_(policy), base_ms_(static_cast<double>(policy.initial_delay.count())), rng_(seed) {}

Duration Backoff::Next() {
  double base = std::min(base_ms_, static_cast<double>(policy_.max_delay.count()));
  base_ms_ =
      std::min(base_ms_ * policy_.multiplier, static_cast<double>(policy_.max_delay.count()));
  double factor = 1.0;
  if (policy_.jitter > 0) {
    std::uniform_real_distribution<double> dist(1.0 - policy_.jitter, 1.0 + policy_.jitter);
    factor = dist(rng_);
  }
  auto ms = static_cast<long long>(base * factor);
  return Duration(std::max(0LL, ms));
}

void LogRetry(const std::string& what, int attempt, const Error& error, Duration delay) {
  log::Warn("{}: attempt {} failed: {}; retrying in {} ms", what, attempt, error.message,
            delay.count());
}

}  // namespace onehpc
