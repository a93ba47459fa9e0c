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

/// A clock that only moves when told to, or when something sleeps on it.
class FakeClock : public Clock {
 public:
  TimePoint Now() override { return now_; }
  void SleepFor(Duration d) override {
    now_ += d;
    slept_ += d;
    ++sleeps_;
  }
  void Advance(Duration d) { now_ += d; }
  /// Total time slept through this clock.
  Duration slept() const { return slept_; }
  int sleeps() const { return sleeps_; }

 private:
  TimePoint now_{};
  Duration slept_{0};
  int sleeps_ = 0;
};

/// The process-wide real clock.
Clock& SystemClock();

}  // namespace onehpc

#endif  // ONEHPC_COMMON_CLOCK_H_
