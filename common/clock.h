// Time behind an interface, so that retries and deadlines are tested without waiting.
#ifndef ONEHPC_COMMON_CLOCK_H_
#define ONEHPC_COMMON_CLOCK_H_

#include <chrono>

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

}  // namespace onehpc

#endif  // ONEHPC_COMMON_CLOCK_H_
