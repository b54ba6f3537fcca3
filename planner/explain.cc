// Text, JSON and SVG views of a plan (explain.h).
#include "planner/explain.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::planner {

namespace {

constexpr int kMaxRankRows = 64;  // ranks listed one per row in the text table

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

double EmbeddingMs(const PhaseTimes& p) {
  return 1e3 * (p.s[kInputDist] + p.s[kLookup] + p.s[kOutputDist] + p.s[kBackwardDist] +
                p.s[kEmbeddingUpdate] + p.s[kReplicaSync] + p.s[kTierMisses]);
}

std::string PhasesJson(const PhaseTimes& p) {
  std::string s = "{";
  for (int i = 0; i < kNumPhases; ++i) {
    absl::StrAppend(&s, i ? ", " : "", "\"", PhaseName(Phase(i)), "_ms\": ", Num(1e3 * p.s[i]));
  }
  absl::StrAppend(&s, ", \"step_ms\": ", Num(1e3 * p.total()), "}");
  return s;
}

int SlowestRank(const StepEstimate& e) {
  int worst = 0;
  for (size_t r = 1; r < e.per_rank.size(); ++r) {
    if (EmbeddingMs(e.per_rank[r]) > EmbeddingMs(e.per_rank[worst])) worst = static_cast<int>(r);
  }
  return worst;
}

}  // namespace

std::string ExplainText(const PlanInputs& in, const PlanResult& r,
                        const std::vector<Baseline>& baselines) {
  const StepEstimate& e = r.group.estimate;
  const int n = r.group.group_size;
  std::string s;
  absl::StrAppend(&s, "tessera-plan: ", in.tables.size(), " tables on ", in.topology.world_size,
                  " ranks (", in.topology.ranks_per_node, " per node), batch ",
                  in.step.batch_per_rank, " per rank, device ", in.step.device, "\n");
  absl::StrAppend(&s, "group size N = ", n, " (M = ", in.topology.world_size / n,
                  " replica groups); tried:");
  for (const GroupTried& g : r.tried) {
    if (g.feasible) {
      absl::StrAppend(&s, " N=", g.group_size, " ", absl::StrFormat("%.3f", 1e3 * g.step_s),
                      " ms;");
    } else {
      absl::StrAppend(&s, " N=", g.group_size, " does not fit;");
    }
  }
  absl::StrAppend(&s, "\npredicted step ", absl::StrFormat("%.3f", 1e3 * e.step.total()),
                  " ms (critical path; planned in ", absl::StrFormat("%.2f", r.planning_s),
                  " s)\n");
  for (int i = 0; i < kNumPhases; ++i) {
    if (e.step.s[i] == 0) continue;
    absl::StrAppend(&s,
                    absl::StrFormat("  %-17s %10.3f ms\n", PhaseName(Phase(i)), 1e3 * e.step.s[i]));
  }
  absl::StrAppend(
      &s, absl::StrFormat("embedding time per rank: imbalance max/mean %.3f\n", e.imbalance));
  absl::StrAppend(
      &s, absl::StrFormat("%6s %10s %10s %10s %9s %9s %9s %9s %9s %9s\n", "rank", "device", "host",
                          "disk", "in_ms", "lookup", "out_ms", "update", "sync", "tier"));
  const int slow = SlowestRank(e);
  const int rows = std::min<int>(n, kMaxRankRows);
  for (int rk = 0; rk < rows; ++rk) {
    const PhaseTimes& p = e.per_rank[rk];
    absl::StrAppend(
        &s, absl::StrFormat("%5d%s %10s %10s %10s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", rk,
                            rk == slow ? "*" : " ", FormatBytes(e.memory[rk][kDevice]),
                            FormatBytes(e.memory[rk][kHost]), FormatBytes(e.memory[rk][kDisk]),
                            1e3 * p.s[kInputDist], 1e3 * p.s[kLookup], 1e3 * p.s[kOutputDist],
                            1e3 * p.s[kEmbeddingUpdate], 1e3 * p.s[kReplicaSync],
                            1e3 * p.s[kTierMisses]));
  }
  if (n > rows) absl::StrAppend(&s, "  ... ", n - rows, " more ranks (--format json lists all)\n");
  if (slow >= rows) absl::StrAppend(&s, "  slowest rank: ", slow, "\n");
  absl::StrAppend(&s, "memory limits per rank: device ", FormatBytes(MemoryLimit(in, kDevice)),
                  ", host ", FormatBytes(MemoryLimit(in, kHost)), ", disk ",
                  FormatBytes(MemoryLimit(in, kDisk)), "\n");
  for (const Baseline& b : baselines) {
    if (!b.ok) {
      absl::StrAppend(&s, "baseline ", b.name, ": ", b.error, "\n");
      continue;
    }
    const double t = b.estimate.step.total();
    absl::StrAppend(
        &s, absl::StrFormat("baseline %s (N = %d): predicted %.3f ms (%.2fx this plan)%s\n", b.name,
                            b.group_size, 1e3 * t, t / std::max(1e-12, e.step.total()),
                            b.fits ? "" : absl::StrCat("; does not fit: ", b.fits_what)));
  }
  absl::StrAppend(&s, "tables:\n");
  for (const std::string& line : r.reasons) absl::StrAppend(&s, "  ", line, "\n");
  return s;
}

std::string ExplainJson(const PlanInputs& in, const PlanResult& r,
                        const std::vector<Baseline>& baselines) {
  const StepEstimate& e = r.group.estimate;
  std::string s = "{";
  absl::StrAppend(&s, "\"world_size\": ", in.topology.world_size,
                  ", \"ranks_per_node\": ", in.topology.ranks_per_node,
                  ", \"group_size\": ", r.group.group_size,
                  ", \"batch_per_rank\": ", in.step.batch_per_rank,
                  ", \"planning_s\": ", Num(r.planning_s), ", \"predicted\": ", PhasesJson(e.step),
                  ", \"imbalance\": ", Num(e.imbalance));
  absl::StrAppend(&s, ", \"memory_limits\": {\"device\": ", Num(MemoryLimit(in, kDevice)),
                  ", \"host\": ", Num(MemoryLimit(in, kHost)),
                  ", \"disk\": ", Num(MemoryLimit(in, kDisk)), "}");
  absl::StrAppend(&s, ", \"tried\": [");
  for (size_t i = 0; i < r.tried.size(); ++i) {
    const GroupTried& g = r.tried[i];
    absl::StrAppend(&s, i ? ", " : "", "{\"group_size\": ", g.group_size,
                    ", \"feasible\": ", g.feasible ? "true" : "false",
                    ", \"step_ms\": ", Num(1e3 * g.step_s),
                    ", \"why_not\": ", JsonString(g.why_not), "}");
  }
  absl::StrAppend(&s, "], \"ranks\": [");
  for (size_t rk = 0; rk < e.per_rank.size(); ++rk) {
    const MemoryBreakdown& m = e.memory_detail[rk];
    absl::StrAppend(
        &s, rk ? ", " : "", "{\"rank\": ", rk, ", \"phases\": ", PhasesJson(e.per_rank[rk]),
        ", \"memory\": {\"device\": ", Num(e.memory[rk][kDevice]),
        ", \"host\": ", Num(e.memory[rk][kHost]), ", \"disk\": ", Num(e.memory[rk][kDisk]),
        ", \"weights\": ", Num(m.weights), ", \"optimizer_state\": ", Num(m.optimizer_state),
        ", \"caches\": ", Num(m.caches), ", \"comm_buffers\": ", Num(m.comm_buffers),
        ", \"activations\": ", Num(m.activations), ", \"dense\": ", Num(m.dense),
        ", \"base\": ", Num(m.base), "}}");
  }
  absl::StrAppend(&s, "], \"baselines\": [");
  for (size_t i = 0; i < baselines.size(); ++i) {
    const Baseline& b = baselines[i];
    absl::StrAppend(&s, i ? ", " : "", "{\"name\": ", JsonString(b.name),
                    ", \"ok\": ", b.ok ? "true" : "false");
    if (b.ok) {
      absl::StrAppend(&s, ", \"group_size\": ", b.group_size,
                      ", \"predicted\": ", PhasesJson(b.estimate.step),
                      ", \"fits\": ", b.fits ? "true" : "false");
    } else {
      absl::StrAppend(&s, ", \"error\": ", JsonString(b.error));
    }
    absl::StrAppend(&s, "}");
  }
  absl::StrAppend(&s, "], \"tables\": [");
  for (size_t t = 0; t < in.tables.size(); ++t) {
    const TableDecision& d = r.group.tables[t];
    absl::StrAppend(&s, t ? ", " : "", "{\"name\": ", JsonString(in.tables[t].config.name),
                    ", \"option\": ", JsonString(OptionName(d.placement.option)),
                    ", \"shards\": ", d.placement.shards.size(),
                    ", \"why\": ", JsonString(r.reasons[t]), "}");
  }
  absl::StrAppend(&s, "]}\n");
  return s;
}

std::string ExplainSvg(const PlanInputs& in, const PlanResult& r) {
  const StepEstimate& e = r.group.estimate;
  const int n = static_cast<int>(e.per_rank.size());
  const int shown = std::min(n, 512);
  const double bar = std::max(1.0, std::min(24.0, 960.0 / shown));
  const double width = 80 + bar * shown + 20, chart = 200;
  double max_ms = 1e-9, max_mem = 1e-9;
  const int kind = in.step.device == "cuda" ? kDevice : kHost;
  const double limit = MemoryLimit(in, MemKind(kind));
  for (int rk = 0; rk < shown; ++rk) {
    max_ms = std::max(max_ms, EmbeddingMs(e.per_rank[rk]));
    max_mem = std::max(max_mem, e.memory[rk][kind]);
  }
  max_mem = std::max(max_mem, limit);
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      width, 2 * chart + 120);
  absl::StrAppend(
      &s, absl::StrFormat("<text x=\"10\" y=\"16\">tessera-plan: %d ranks, N = %d, predicted "
                          "step %.3f ms; top: embedding ms per rank (lookup, update, transfers); "
                          "bottom: %s memory per rank (line: limit)</text>\n",
                          in.topology.world_size, r.group.group_size, 1e3 * e.step.total(),
                          MemKindName(MemKind(kind))));
  const char* colors[] = {"#4c78a8", "#f58518", "#54a24b", "#b279a2"};
  for (int rk = 0; rk < shown; ++rk) {
    const PhaseTimes& p = e.per_rank[rk];
    const double parts[4] = {1e3 * p.s[kLookup], 1e3 * p.s[kEmbeddingUpdate],
                             1e3 * (p.s[kInputDist] + p.s[kOutputDist] + p.s[kBackwardDist]),
                             1e3 * (p.s[kReplicaSync] + p.s[kTierMisses])};
    double y = 30 + chart;
    const double x = 80 + rk * bar;
    for (int k = 0; k < 4; ++k) {
      const double h = chart * parts[k] / max_ms;
      y -= h;
      absl::StrAppend(&s, absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                                          "height=\"%.1f\" fill=\"%s\"/>\n",
                                          x, y, std::max(0.5, bar - 1), h, colors[k]));
    }
    const double mh = chart * e.memory[rk][kind] / max_mem;
    absl::StrAppend(&s, absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                                        "height=\"%.1f\" fill=\"#72b7b2\"/>\n",
                                        x, 80 + 2 * chart - mh, std::max(0.5, bar - 1), mh));
  }
  const double ly = 80 + 2 * chart - chart * limit / max_mem;
  absl::StrAppend(&s, absl::StrFormat("<line x1=\"80\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                      "stroke=\"red\"/>\n",
                                      ly, width - 20, ly));
  absl::StrAppend(&s, absl::StrFormat("<text x=\"4\" y=\"40\">%.3f ms</text>\n", max_ms));
  absl::StrAppend(&s, absl::StrFormat("<text x=\"4\" y=\"%.0f\">%s</text>\n", 90 + chart,
                                      FormatBytes(max_mem)));
  absl::StrAppend(
      &s, absl::StrFormat("<text x=\"80\" y=\"%.0f\">lookup (blue), update "
                          "(orange), transfers (green), sync + tier (purple)%s</text>\n",
                          2 * chart + 110,
                          shown < n ? absl::StrCat("; first ", shown, " of ", n, " ranks") : ""));
  absl::StrAppend(&s, "</svg>\n");
  return s;
}

}  // namespace tessera::planner
