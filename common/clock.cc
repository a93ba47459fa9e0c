#include "common/clock.h"

#include <thread>

namespace onehpc {

TimePoint RealClock::Now() { return std::chrono::steady_clock::now(); }

void RealClock::SleepFor(Duration d) {
  if (d.count() > 0) std::this_thread::sleep_for(d);
}

Clock& SystemClock() {
  static RealClock clock;
  return clock;
}

}  // namespace onehpc
