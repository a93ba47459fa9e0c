#include "common/clock.h"

#include <ctime>
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

std::string UtcTimestamp(std::time_t t) {
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace onehpc
