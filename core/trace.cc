#include "core/trace.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>

namespace tessera::trace {

namespace {

std::atomic<bool> g_recording{false};
std::atomic<int64_t> g_origin{0};
std::atomic<int64_t> g_max{1 << 20};

struct ThreadBuffer {
  int thread = 0;
  std::vector<Event> events;
  int64_t dropped = 0;
};

std::mutex& Mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<std::shared_ptr<ThreadBuffer>>& Buffers() {
  static auto* b = new std::vector<std::shared_ptr<ThreadBuffer>>;
  return *b;
}

ThreadBuffer& Mine() {
  thread_local std::shared_ptr<ThreadBuffer> mine;
  if (!mine) {
    mine = std::make_shared<ThreadBuffer>();
    std::lock_guard<std::mutex> l(Mu());
    mine->thread = static_cast<int>(Buffers().size());
    Buffers().push_back(mine);
  }
  return *mine;
}

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void AppendEscaped(std::string* out, const char* s) {
  for (; *s; ++s) {
    const char c = *s;
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      *out += buf;
    } else {
      out->push_back(c);
    }
  }
}

}  // namespace

bool Recording() { return g_recording.load(std::memory_order_relaxed); }
void Start(int64_t max_events_per_thread) {
  g_max.store(max_events_per_thread);
  g_recording.store(true);
}
void Stop() { g_recording.store(false); }
void SetOrigin() { g_origin.store(MonotonicNs()); }
int64_t NowNs() { return MonotonicNs() - g_origin.load(std::memory_order_relaxed); }

const char* Intern(const std::string& name) {
  static auto* names = new std::set<std::string>;
  std::lock_guard<std::mutex> l(Mu());
  return names->insert(name).first->c_str();
}

Span::~Span() {
  if (!on_) return;
  e_.dur_ns = NowNs() - e_.start_ns;
  ThreadBuffer& b = Mine();
  e_.thread = b.thread;
  if (static_cast<int64_t>(b.events.size()) < g_max.load(std::memory_order_relaxed)) {
    b.events.push_back(e_);
  } else {
    ++b.dropped;
  }
}

namespace {
std::map<const void*, const char*>& Categories() {
  static auto* m = new std::map<const void*, const char*>;
  return *m;
}
}  // namespace

void SetPhaseCategory(const void* accumulator, const char* category) {
  std::lock_guard<std::mutex> l(Mu());
  Categories()[accumulator] = category;
}

void RecordPhase(const void* accumulator, const std::string& phase, double seconds,
                 double end_wall) {
  const int64_t end = end_wall >= 0 ? static_cast<int64_t>(std::llround(end_wall * 1e9)) -
                                          g_origin.load(std::memory_order_relaxed)
                                    : NowNs();
  Event e;
  e.name = Intern(phase);
  {
    std::lock_guard<std::mutex> l(Mu());
    auto it = Categories().find(accumulator);
    e.category = it == Categories().end() ? "phase" : it->second;
  }
  e.dur_ns = static_cast<int64_t>(seconds * 1e9);
  e.start_ns = end - e.dur_ns;
  ThreadBuffer& b = Mine();
  e.thread = b.thread;
  if (static_cast<int64_t>(b.events.size()) < g_max.load(std::memory_order_relaxed)) {
    b.events.push_back(e);
  } else {
    ++b.dropped;
  }
}

std::vector<Event> Take(int64_t* dropped) {
  std::vector<Event> all;
  int64_t lost = 0;
  std::lock_guard<std::mutex> l(Mu());
  for (auto& b : Buffers()) {
    all.insert(all.end(), b->events.begin(), b->events.end());
    b->events.clear();
    lost += b->dropped;
    b->dropped = 0;
  }
  // Enclosing spans first at equal starts (they are longer), so viewers nest them.
  std::sort(all.begin(), all.end(), [](const Event& a, const Event& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.dur_ns > b.dur_ns;
  });
  if (dropped != nullptr) *dropped = lost;
  return all;
}

std::string EventsJson(const std::vector<Event>& events, int rank) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"tid\": 0, "
                "\"args\": {\"name\": \"rank %d\"}}",
                rank, rank);
  s += buf;
  std::set<int> threads;
  for (const Event& e : events) threads.insert(e.thread);
  for (int t : threads) {
    std::snprintf(buf, sizeof(buf),
                  ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
                  "\"args\": {\"name\": \"%s%d\"}}",
                  rank, t, t == 0 ? "main " : "thread ", t);
    s += buf;
  }
  for (const Event& e : events) {
    s += ",\n{\"ph\": \"X\", \"name\": \"";
    AppendEscaped(&s, e.name);
    s += "\", \"cat\": \"";
    AppendEscaped(&s, e.category);
    std::snprintf(buf, sizeof(buf), "\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f",
                  rank, e.thread, e.start_ns / 1e3, e.dur_ns / 1e3);
    s += buf;
    if (e.arg_names[0] != nullptr) {
      s += ", \"args\": {";
      for (int i = 0; i < 2 && e.arg_names[i] != nullptr; ++i) {
        std::snprintf(buf, sizeof(buf), "%s\"%s\": %lld", i ? ", " : "", e.arg_names[i],
                      static_cast<long long>(e.args[i]));
        s += buf;
      }
      s += "}";
    }
    s += "}";
  }
  return s;
}

}  // namespace tessera::trace
