// A clock that only moves when told to, or when something sleeps on it.
#ifndef ONEHPC_TESTS_FAKES_CLOCK_H_
#define ONEHPC_TESTS_FAKES_CLOCK_H_

#include "common/clock.h"

namespace onehpc::fakes {

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

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_CLOCK_H_
