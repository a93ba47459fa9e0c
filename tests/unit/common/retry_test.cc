#include "common/retry.h"

#include <gtest/gtest.h>

#include "common/log.h"
#include "tests/fakes/clock.h"

namespace onehpc {
namespace {

RetryPolicy FastPolicy() {
  RetryPolicy p;
  p.initial_delay = Duration(100);
  p.multiplier = 2.0;
  p.max_delay = Duration(1000);
  p.max_attempts = 0;
  p.deadline = Duration(0);
  p.jitter = 0.0;
  return p;
}

TEST(BackoffTest, GrowsAndCaps) {
  Backoff b(FastPolicy(), 1);
  EXPECT_EQ(b.Next().count(), 100);
  EXPECT_EQ(b.Next().count(), 200);
  EXPECT_EQ(b.Next().count(), 400);
  EXPECT_EQ(b.Next().count(), 800);
  EXPECT_EQ(b.Next().count(), 1000);
  EXPECT_EQ(b.Next().count(), 1000);
}

TEST(BackoffTest, JitterStaysInBounds) {
  RetryPolicy p = FastPolicy();
  p.jitter = 0.25;
  p.multiplier = 1.0;
  Backoff b(p, 42);
  bool varied = false;
  Duration first = b.Next();
  for (int i = 0; i < 200; ++i) {
    Duration d = b.Next();
    EXPECT_GE(d.count(), 75);
    EXPECT_LE(d.count(), 125);
    if (d != first) varied = true;
  }
  EXPECT_TRUE(varied);
}

TEST(RetryTest, SucceedsAfterFailuresAndSleepsOnTheClock) {
  fakes::FakeClock clock;
  int calls = 0;
  log::Capture capture;
  Result<int> r = Retry<int>(
      FastPolicy(), clock, "thing", [](const Error&) { return true; },
      [&]() -> Result<int> {
        if (++calls < 3) return Fail(ErrorKind::kNetwork, "down");
        return 7;
      });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(clock.slept().count(), 300);
  EXPECT_TRUE(capture.Contains("thing: attempt 1 failed: down; retrying in 100 ms"));
}

TEST(RetryTest, StopsOnNonRetryableError) {
  fakes::FakeClock clock;
  int calls = 0;
  Result<int> r = Retry<int>(
      FastPolicy(), clock, "thing", [](const Error& e) { return e.kind == ErrorKind::kNetwork; },
      [&]() -> Result<int> {
        ++calls;
        return Fail(ErrorKind::kInvalidInput, "bad");
      });
  ASSERT_FALSE(r);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.error().message, "bad");
  EXPECT_EQ(clock.sleeps(), 0);
}

TEST(RetryTest, HonoursMaxAttempts) {
  fakes::FakeClock clock;
  RetryPolicy p = FastPolicy();
  p.max_attempts = 4;
  int calls = 0;
  Result<int> r = Retry<int>(
      p, clock, "op", [](const Error&) { return true; },
      [&]() -> Result<int> {
        ++calls;
        return Fail(ErrorKind::kNetwork, "down");
      });
  ASSERT_FALSE(r);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(r.error().message, "op: gave up after 4 attempts: down");
}

TEST(RetryTest, HonoursDeadlineWithoutSleepingPastIt) {
  fakes::FakeClock clock;
  RetryPolicy p = FastPolicy();
  p.deadline = Duration(1000);
  int calls = 0;
  Result<int> r = Retry<int>(
      p, clock, "op", [](const Error&) { return true; },
      [&]() -> Result<int> {
        ++calls;
        clock.Advance(Duration(50));  // each attempt takes 50 ms
        return Fail(ErrorKind::kNetwork, "down");
      });
  ASSERT_FALSE(r);
  // 50 +100 +50 +200 +50 +400 +50 = 900; the next delay (800) would pass 1000.
  EXPECT_EQ(calls, 4);
  auto total = std::chrono::duration_cast<Duration>(clock.Now() - TimePoint{});
  EXPECT_LE(total.count(), 1000);
  EXPECT_NE(r.error().message.find("deadline"), std::string::npos);
}

}  // namespace
}  // namespace onehpc
