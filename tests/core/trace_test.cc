// The step trace's recorder (core/trace.h): spans on the calling thread, phases placed at their
// own end reading so they nest exactly around the spans they timed.
#include "core/trace.h"

#include <gtest/gtest.h>

#include "core/timer.h"

namespace tessera {
namespace {

TEST(TraceTest, SpanRecordsOnlyWhileRecording) {
  trace::Take();
  { trace::Span before("before", "test"); }
  trace::Start();
  trace::SetOrigin();
  {
    trace::Span s("inside", "test");
    s.Arg("bytes", 42);
  }
  trace::Stop();
  { trace::Span after("after", "test"); }
  const std::vector<trace::Event> events = trace::Take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_STREQ(events[0].name, "inside");
  EXPECT_STREQ(events[0].arg_names[0], "bytes");
  EXPECT_EQ(events[0].args[0], 42);
  EXPECT_GE(events[0].start_ns, 0);
}

TEST(TraceTest, WallPhaseSpanEndsAtItsOwnEndReading) {
  trace::Take();
  trace::Start();
  trace::SetOrigin();
  PhaseTimes times;
  const double end = PhaseTimes::Now(PhaseTimes::Clock::kWall);
  // Recorded later than the phase ended: the span still ends at `end`, not at the recording.
  for (volatile int i = 0; i < 2000000; ++i) {
  }
  times.Add("phase", 0.001, end);
  trace::Stop();
  const std::vector<trace::Event> events = trace::Take();
  ASSERT_EQ(events.size(), 1u);
  const int64_t end_ns = events[0].start_ns + events[0].dur_ns;
  EXPECT_EQ(events[0].dur_ns, 1000000);
  EXPECT_LT(std::abs(end_ns - (trace::NowNs() -
                               static_cast<int64_t>(
                                   (PhaseTimes::Now(PhaseTimes::Clock::kWall) - end) * 1e9))),
            1000);
  EXPECT_DOUBLE_EQ(times.Get("phase"), 0.001);
}

TEST(TraceTest, ScopedPhaseNestsAroundTheSpansItTimes) {
  trace::Take();
  trace::Start();
  trace::SetOrigin();
  PhaseTimes times;
  for (int rep = 0; rep < 100; ++rep) {
    ScopedPhase phase(&times, "outer");
    trace::Span inner("inner", "test");
  }
  trace::Stop();
  const std::vector<trace::Event> events = trace::Take();
  ASSERT_EQ(events.size(), 200u);
  std::vector<const trace::Event*> outer, inner;
  for (const trace::Event& e : events)
    (std::string(e.name) == "outer" ? outer : inner).push_back(&e);
  ASSERT_EQ(outer.size(), inner.size());
  for (size_t i = 0; i < outer.size(); ++i) {
    // Nanosecond truncation of the phase's seconds: 1 ns of slack.
    EXPECT_LE(outer[i]->start_ns, inner[i]->start_ns + 1) << i;
    EXPECT_GE(outer[i]->start_ns + outer[i]->dur_ns + 1, inner[i]->start_ns + inner[i]->dur_ns)
        << i;
  }
}

}  // namespace
}  // namespace tessera
