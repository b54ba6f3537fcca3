// `tessera-plan replay TRACE`: the step's dependency graph from a step trace (trainer/
// trace_writer.h), replayed (tools/plan_replay.h).
#include "tools/plan_replay.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "yaml-cpp/yaml.h"

namespace tessera {

namespace {

struct Span {
  std::string name, cat;
  double start = 0, dur = 0;  // microseconds
  int64_t bytes = 0, peers = 0;
  double end() const { return start + dur; }
};

// One rank's estimator-phase intervals (nested ones: the innermost counts), for group_size
// what-ifs.
struct PhaseInterval {
  double start = 0, end = 0;
  int phase = -1;
};

// One rank's step: its main thread's spans inside the step's "iteration" span.
struct RankStep {
  double start = 0, dur = 0;
  std::vector<PhaseInterval> phases;  // estimator phases' spans (group_size what-ifs)
  std::vector<Span> spans;        // every span of the main thread inside the step
  std::vector<Span> collectives;  // the collectives among them, in order
};

struct WhatIf {
  double a2a_payload_scale = 1;  // comm_dtype=bf16: 0.5 of the output / backward dist bytes
  double link_scale = 1;         // link=K: every collective's transfer / K
  int group_size = 0;            // group_size=N: 0 = the traced one
  // group_size=N, filled from the trace: per estimator phase the factor its spans take (the
  // planner's prediction at N over the traced run's), and per step the time of phases the
  // traced run predicted none of (added to every rank's step end).
  std::vector<double> phase_scale;
  double added_us = 0;
  std::string text;
};

// The factor of the innermost phase interval holding `t` (1 outside every interval).
double ScaleAt(const std::vector<PhaseInterval>& iv, const WhatIf& w, double t) {
  double best_len = 1e300, scale = 1;
  for (const PhaseInterval& p : iv) {
    if (p.start <= t && t < p.end && p.end - p.start < best_len) {
      best_len = p.end - p.start;
      scale = w.phase_scale[p.phase];
    }
  }
  return scale;
}

// [a, b) of a rank's compute with each part scaled by the phase it belongs to.
double ScaledSpan(const std::vector<PhaseInterval>& iv, const WhatIf& w, double a, double b) {
  if (w.phase_scale.empty() || b <= a) return std::max(0.0, b - a);
  std::vector<double> cuts = {a, b};
  for (const PhaseInterval& p : iv) {
    if (p.start > a && p.start < b) cuts.push_back(p.start);
    if (p.end > a && p.end < b) cuts.push_back(p.end);
  }
  std::sort(cuts.begin(), cuts.end());
  double out = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    out += (cuts[i + 1] - cuts[i]) * ScaleAt(iv, w, 0.5 * (cuts[i] + cuts[i + 1]));
  }
  return out;
}

// The phase span that encloses `c` on its thread (the innermost non-collective one), or "".
std::string EnclosingPhase(const RankStep& s, const Span& c) {
  std::string best;
  double best_dur = 1e300;
  for (const Span& p : s.spans) {
    if (p.cat == "collective" || p.cat == "iteration") continue;
    if (p.start <= c.start && c.end() <= p.end() + 1e-3 && p.dur < best_dur) {
      best = p.name;
      best_dur = p.dur;
    }
  }
  return best;
}

struct Replay {
  double step_us = 0;                  // the replayed step (the slowest rank's end)
  std::vector<double> end_us;          // per rank
  std::vector<double> compute_us;      // per rank: its own compute (gaps between collectives)
  std::vector<double> wait_us;         // per rank: waiting for the others at collectives
  std::vector<double> transfer_us;     // per rank: the collectives' own time
  std::vector<int> critical_rank;      // per collective: the rank that arrived last
};

// Replays the window: each rank computes its gaps; collective k ends when the last of its ranks
// arrives plus its own time (the shortest of the ranks' durations: the last to arrive waits
// least), scaled by the what-if.
Replay ReplayStep(const std::vector<RankStep>& ranks, const WhatIf& w) {
  const int n = static_cast<int>(ranks.size());
  Replay r;
  r.end_us.assign(n, 0);
  r.compute_us.assign(n, 0);
  r.wait_us.assign(n, 0);
  r.transfer_us.assign(n, 0);
  // Each rank starts where its trace starts (the window's first step), relative to the first.
  double origin = 1e300;
  for (const RankStep& q : ranks) origin = std::min(origin, q.start);
  std::vector<double> t(n, 0), last_end(n, 0);
  for (int q = 0; q < n; ++q) {
    last_end[q] = ranks[q].start;
    t[q] = ranks[q].start - origin;
  }
  const size_t k_max = ranks[0].collectives.size();
  for (size_t k = 0; k < k_max; ++k) {
    double arrive_max = 0, own = 1e300;
    int last = 0;
    std::vector<double> arrive(n);
    for (int q = 0; q < n; ++q) {
      const Span& c = ranks[q].collectives[k];
      const double gap = ScaledSpan(ranks[q].phases, w, last_end[q], c.start);
      last_end[q] = c.end();
      r.compute_us[q] += gap;
      arrive[q] = t[q] + gap;
      if (arrive[q] > arrive_max) {
        arrive_max = arrive[q];
        last = q;
      }
      own = std::min(own, c.dur);
    }
    const Span& c0 = ranks[0].collectives[k];
    double scale = 1 / w.link_scale;
    if (c0.name == "all_to_all") {
      const std::string phase = EnclosingPhase(ranks[0], c0);
      if (phase == "output_dist" || phase == "backward_dist") scale *= w.a2a_payload_scale;
    }
    if (!w.phase_scale.empty()) scale *= ScaleAt(ranks[0].phases, w, c0.start + 0.5 * c0.dur);
    own *= scale;
    r.critical_rank.push_back(last);
    for (int q = 0; q < n; ++q) {
      r.wait_us[q] += arrive_max - arrive[q];
      r.transfer_us[q] += own;
      t[q] = arrive_max + own;
    }
  }
  for (int q = 0; q < n; ++q) {
    const double tail = ScaledSpan(ranks[q].phases, w, last_end[q], ranks[q].start + ranks[q].dur) +
                        w.added_us;
    r.compute_us[q] += tail;
    t[q] += tail;
    r.end_us[q] = t[q];
    r.step_us = std::max(r.step_us, t[q]);
  }
  return r;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tessera-plan replay: %s\n", msg.c_str());
  return 1;
}

constexpr char kUsage[] =
    "usage: tessera-plan replay TRACE [--what-if comm_dtype=bf16] [--what-if link=2] ...\n"
    "Replays a step trace (tessera-bench / tessera-train --trace): per rank the critical path\n"
    "(compute, waiting for the other ranks, the collectives' own time), the traced step beside\n"
    "the replayed one, each estimator phase measured beside the profile's prediction (when the\n"
    "trace has it: tessera-bench writes it), and the step under each --what-if:\n"
    "  comm_dtype=bf16  the output and backward dists' all-to-alls move half the bytes\n"
    "  link=K           every collective's own time / K (a link K times faster)\n"
    "  group_size=N     another sharding group size of the same world: each phase's spans\n"
    "                   scaled by the planner's prediction for its plan at N over the traced\n"
    "                   run's (tessera-bench traces carry both)\n";

}  // namespace

int RunPlanReplay(int argc, char** argv) {
  std::string path;
  std::vector<WhatIf> what_ifs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (a == "--what-if" || a.rfind("--what-if=", 0) == 0) {
      std::string v = a == "--what-if" ? (i + 1 < argc ? argv[++i] : "") : a.substr(10);
      std::vector<std::string> kv = absl::StrSplit(v, absl::MaxSplits('=', 1));
      WhatIf w;
      w.text = v;
      double k = 0;
      if (kv.size() == 2 && kv[0] == "comm_dtype" && (kv[1] == "bf16" || kv[1] == "fp16")) {
        w.a2a_payload_scale = 0.5;
      } else if (kv.size() == 2 && kv[0] == "link" && absl::SimpleAtod(kv[1], &k) && k > 0) {
        w.link_scale = k;
      } else if (kv.size() == 2 && kv[0] == "group_size" &&
                 absl::SimpleAtoi(kv[1], &w.group_size) && w.group_size >= 1) {
        // filled from the trace below
      } else {
        std::fprintf(stderr, "tessera-plan replay: bad --what-if '%s'\n%s", v.c_str(), kUsage);
        return 2;
      }
      what_ifs.push_back(w);
    } else if (a.rfind("--", 0) == 0 || !path.empty()) {
      std::fprintf(stderr, "tessera-plan replay: unexpected argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      path = a;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "tessera-plan replay: a TRACE file is required\n%s", kUsage);
    return 2;
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Fail(absl::StrCat(path, ": not a trace (", e.what(), ")"));
  }
  const YAML::Node events = root["traceEvents"];
  if (!events || !events.IsSequence()) return Fail(path + ": no traceEvents list");
  // Per rank, the main thread's spans; the step spans.
  std::map<int, std::vector<Span>> main_spans, steps;
  try {
    for (const YAML::Node& e : events) {
      if (e["ph"].as<std::string>() != "X" || e["tid"].as<int>() != 0) continue;
      Span s;
      s.name = e["name"].as<std::string>();
      s.cat = e["cat"].as<std::string>();
      s.start = e["ts"].as<double>();
      s.dur = e["dur"].as<double>();
      if (const YAML::Node args = e["args"]) {
        if (args["bytes"]) s.bytes = args["bytes"].as<int64_t>();
        if (args["peers"]) s.peers = args["peers"].as<int64_t>();
      }
      const int pid = e["pid"].as<int>();
      (s.cat == "iteration" ? steps : main_spans)[pid].push_back(s);
    }
  } catch (const YAML::Exception& e) {
    return Fail(absl::StrCat(path, ": bad event (", e.what(), ")"));
  }
  if (steps.empty()) return Fail(path + ": no step spans (cat \"iteration\")");
  const int n = static_cast<int>(steps.size());
  const size_t num_steps = steps.begin()->second.size();
  for (const auto& [rank, s] : steps) {
    if (s.size() != num_steps) {
      return Fail(absl::StrCat(path, ": rank ", rank, " has ", s.size(), " steps, rank ",
                               steps.begin()->first, " ", num_steps));
    }
  }
  std::printf("tessera-plan replay %s: %d rank(s), %zu step(s)\n", path.c_str(), n, num_steps);
  // The whole window replayed at once (a rank that ends a step late starts the next one late):
  // per rank its spans from its first step's start to its last step's end.
  std::vector<RankStep> ranks;
  double first = 1e300, last = 0;
  for (const auto& [rank, s] : steps) {
    RankStep rs;
    rs.start = s.front().start;
    rs.dur = s.back().end() - rs.start;
    first = std::min(first, rs.start);
    last = std::max(last, s.back().end());
    for (const Span& x : main_spans[rank]) {
      if (x.start >= rs.start && x.end() <= rs.start + rs.dur + 1e-3) {
        rs.spans.push_back(x);
        if (x.cat == "collective") rs.collectives.push_back(x);
      }
    }
    ranks.push_back(std::move(rs));
  }
  // group_size=N: the estimator phases' spans per rank and each phase's factor from the trace.
  const YAML::Node est_phases = root["otherData"]["estimator_phases"];
  try {
  for (WhatIf& w : what_ifs) {
    if (w.group_size == 0) continue;
    const YAML::Node others = root["otherData"]["group_size_what_if"];
    const int traced = root["otherData"]["group_size"] ? root["otherData"]["group_size"].as<int>()
                                                       : 0;
    if (!est_phases || !est_phases.IsSequence() || traced == 0) {
      return Fail(absl::StrCat(path, ": --what-if ", w.text, " needs the planner's predictions "
                               "in the trace (tessera-bench --trace with a --profile)"));
    }
    std::vector<double> at;
    std::string sizes = absl::StrCat(traced, " (traced)");
    if (w.group_size == traced) {
      for (const YAML::Node& p : est_phases) at.push_back(p["predicted_ms"].as<double>());
    }
    if (others && others.IsSequence()) {
      for (const YAML::Node& g : others) {
        const int size = g["group_size"].as<int>();
        absl::StrAppend(&sizes, ", ", size);
        if (size == w.group_size) at = g["phases_ms"].as<std::vector<double>>();
      }
    }
    if (at.size() != est_phases.size()) {
      return Fail(absl::StrCat(path, ": no prediction at group size ", w.group_size,
                               " in the trace (it has ", sizes, ")"));
    }
    w.phase_scale.assign(at.size(), 1.0);
    for (size_t i = 0; i < at.size(); ++i) {
      const double now = est_phases[i]["predicted_ms"].as<double>();
      if (now > 0) {
        w.phase_scale[i] = at[i] / now;
      } else {
        // A phase the traced plan did not have: its time at every step's end.
        w.added_us += 1e3 * std::max(0.0, at[i]) * static_cast<double>(num_steps);
      }
    }
  }
  if (est_phases && est_phases.IsSequence()) {
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < est_phases.size(); ++i) {
        for (const YAML::Node& name : est_phases[i]["names"]) {
          const std::string full = name.as<std::string>();
          const size_t slash = full.find('/');
          for (const Span& x : ranks[q].spans) {
            if (x.cat == full.substr(0, slash) && x.name == full.substr(slash + 1)) {
              ranks[q].phases.push_back({x.start, x.end(), static_cast<int>(i)});
            }
          }
        }
      }
    }
  }
  } catch (const YAML::Exception& e) {
    return Fail(absl::StrCat(path, ": bad otherData (", e.what(), ")"));
  }
  for (int q = 1; q < n; ++q) {
    if (ranks[q].collectives.size() != ranks[0].collectives.size()) {
      return Fail(absl::StrCat(path, ": rank ", q, " made ", ranks[q].collectives.size(),
                               " collective calls in the window, rank 0 ",
                               ranks[0].collectives.size()));
    }
  }
  const Replay sum = ReplayStep(ranks, WhatIf{});
  std::map<int, int> critical_count;  // rank -> collectives it arrived last at
  for (int c : sum.critical_rank) ++critical_count[c];
  const double steps_d = static_cast<double>(num_steps);
  const double t_ms = (last - first) / 1e3 / steps_d, r_ms = sum.step_us / 1e3 / steps_d;
  std::printf("step: traced %.3f ms (the window, first rank's start to last rank's end, per "
              "step), replayed %.3f ms (%+.1f%%)\n",
              t_ms, r_ms, t_ms > 0 ? 100 * (r_ms / t_ms - 1) : 0.0);
  std::printf("critical path per rank (ms per step): compute = its own work between collectives, "
              "wait = for the last rank to arrive, collective = the calls' own time\n");
  std::printf("  %4s %10s %10s %10s %10s %s\n", "rank", "compute", "wait", "collective", "end",
              "arrived last at");
  for (int q = 0; q < n; ++q) {
    std::printf("  %4d %10.3f %10.3f %10.3f %10.3f %d collective call(s)\n", q,
                sum.compute_us[q] / 1e3 / steps_d, sum.wait_us[q] / 1e3 / steps_d,
                sum.transfer_us[q] / 1e3 / steps_d,
                (sum.compute_us[q] + sum.wait_us[q] + sum.transfer_us[q]) / 1e3 / steps_d,
                critical_count[q]);
  }
  // Phases beside the profile's prediction (tessera-bench puts it in otherData).
  const YAML::Node phases = root["otherData"]["estimator_phases"];
  if (phases && phases.IsSequence()) {
    std::printf("phases (ms per step; measured: the slowest rank's spans, predicted: the "
                "profile's estimate for the run)\n  %-18s %10s %10s %8s\n",
                "phase", "measured", "predicted", "ratio");
    for (const YAML::Node& p : phases) {
      double worst = 0;
      for (const auto& [rank, spans] : main_spans) {
        double total = 0;
        for (const YAML::Node& name : p["names"]) {
          const std::string full = name.as<std::string>();
          const size_t slash = full.find('/');
          for (const Span& x : spans) {
            if (x.cat == full.substr(0, slash) && x.name == full.substr(slash + 1)) total += x.dur;
          }
        }
        worst = std::max(worst, total);
      }
      const double meas = worst / 1e3 / steps_d;
      const double pred = p["predicted_ms"].as<double>();
      std::printf("  %-18s %10.3f %10s %8s\n", p["phase"].as<std::string>().c_str(), meas,
                  pred >= 0 ? absl::StrFormat("%.3f", pred).c_str() : "-",
                  pred >= 0 && meas > 0 ? absl::StrFormat("%.2f", pred / meas).c_str() : "-");
    }
  }
  for (size_t w = 0; w < what_ifs.size(); ++w) {
    const double ms = ReplayStep(ranks, what_ifs[w]).step_us / 1e3 / steps_d;
    std::printf("what if %s: step %.3f ms (%+.1f%% against the replay)\n",
                what_ifs[w].text.c_str(), ms, r_ms > 0 ? 100 * (ms / r_ms - 1) : 0.0);
  }
  return 0;
}

}  // namespace tessera
