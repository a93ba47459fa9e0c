// Time behind an interface, so that retries and deadlines are tested without waiting.
#ifndef ONEHPC_COMMON_CLOCK_H_
#define ONEHPC_COMMON_CLOCK_H_

#include <chrono>
#include <ctime>
#include <string>

namespace onehpc {

using Duration = std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

/// A monotonic clock that can also sleep.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  virtual void SleepFor(Duration d) = 0;
};

/// std::chrono::steady_clock and std::this_thread::sleep_for.
class RealClock : public Clock {
 public:
  TimePoint Now() override;
  void SleepFor(Duration d) override;
};

/// The process-wide real clock.
Clock& SystemClock();

/// `t` (seconds since the epoch) in UTC, ISO 8601 to the second: "2026-12-02T10:30:00Z".
std::string UtcTimestamp(std::time_t t);

}  // namespace onehpc

#endif  // ONEHPC_COMMON_CLOCK_H_
