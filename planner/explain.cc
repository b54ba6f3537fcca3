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
  absl::StrAppend(&s, absl::StrFormat("%6s %10s %10s %10s %9s %9s %9s %9s %9s %9s %9s\n", "rank",
                                      "device", "host", "disk", "in_ms", "lookup", "out_ms",
                                      "update", "sync", "tier", "wait"));
  const int slow = SlowestRank(e);
  const int rows = std::min<int>(n, kMaxRankRows);
  for (int rk = 0; rk < rows; ++rk) {
    const PhaseTimes& p = e.per_rank[rk];
    absl::StrAppend(
        &s, absl::StrFormat("%5d%s %10s %10s %10s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", rk,
                            rk == slow ? "*" : " ", FormatBytes(e.memory[rk][kDevice]),
                            FormatBytes(e.memory[rk][kHost]), FormatBytes(e.memory[rk][kDisk]),
                            1e3 * p.s[kInputDist], 1e3 * p.s[kLookup], 1e3 * p.s[kOutputDist],
                            1e3 * p.s[kEmbeddingUpdate], 1e3 * p.s[kReplicaSync],
                            1e3 * p.s[kTierMisses],
                            rk < static_cast<int>(e.wait.size()) ? 1e3 * e.wait[rk].total() : 0.0));
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
        ", \"wait\": ", PhasesJson(rk < e.wait.size() ? e.wait[rk] : PhaseTimes{}),
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
  // Two charts over the same rank axis: stacked predicted embedding ms per rank (top) and the
  // memory of the rank's kind (host, or device for cuda) against its limit (bottom), each with a
  // y axis in its units and ticks, rank labels under the bars, a title and a legend; the canvas
  // is sized to what it holds.
  const StepEstimate& e = r.group.estimate;
  const int n = static_cast<int>(e.per_rank.size());
  const int shown = std::min(n, 512);
  const double bar = std::max(1.0, std::min(28.0, 960.0 / std::max(1, shown)));
  const double left = 78, right = 24, top = 58, chart = 180, gap = 64, bottom = 70;
  const double plot_w = bar * shown;
  const double width = std::max(640.0, left + plot_w + right);
  const double height = top + chart + gap + chart + bottom;
  double max_ms = 1e-9, max_mem = 1e-9;
  const int kind = in.step.device == "cuda" ? kDevice : kHost;
  const double limit = MemoryLimit(in, MemKind(kind));
  for (int rk = 0; rk < shown; ++rk) {
    max_ms = std::max(max_ms, EmbeddingMs(e.per_rank[rk]));
    max_mem = std::max(max_mem, e.memory[rk][kind]);
  }
  if (limit > 0) max_mem = std::max(max_mem, limit);
  max_ms *= 1.1;
  max_mem *= 1.05;
  const double y_ms = top, y_mem = top + chart + gap;  // tops of the two charts
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height, width, height);
  absl::StrAppend(
      &s, absl::StrFormat("<text x=\"10\" y=\"18\" font-size=\"13\" font-weight=\"bold\">"
                          "tessera-plan: %d ranks, group size N = %d, predicted step %.3f ms"
                          "</text>\n",
                          in.topology.world_size, r.group.group_size, 1e3 * e.step.total()));
  absl::StrAppend(&s, absl::StrFormat("<text x=\"10\" y=\"34\">%d tables, batch %d per rank, "
                                      "device %s; ranks of the first group%s</text>\n",
                                      static_cast<int>(in.tables.size()),
                                      static_cast<int>(in.step.batch_per_rank), in.step.device,
                                      shown < n ? absl::StrCat(" (first ", shown, " of ", n, ")")
                                                : std::string()));
  // Axes: y ticks at 0, 1/4 .. 1 of the range, with labels in the chart's units.
  auto axis = [&](double y0, double max, bool bytes, const std::string& title) {
    absl::StrAppend(&s, absl::StrFormat("<text x=\"%.0f\" y=\"%.0f\" font-weight=\"bold\">%s"
                                        "</text>\n",
                                        left, y0 - 8, title));
    for (int i = 0; i <= 4; ++i) {
      const double v = max * i / 4, y = y0 + chart - chart * i / 4;
      absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                          "stroke=\"#ddd\"/>\n",
                                          left, y, left + plot_w, y));
      absl::StrAppend(&s, absl::StrFormat("<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s"
                                          "</text>\n",
                                          left - 6, y + 4,
                                          bytes ? FormatBytes(v) : absl::StrFormat("%.3g ms", v)));
    }
    absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                        "stroke=\"black\"/>\n<line x1=\"%.1f\" y1=\"%.1f\" "
                                        "x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                                        left, y0, left, y0 + chart, left, y0 + chart, left + plot_w,
                                        y0 + chart));
    // Rank labels: every k-th rank so that labels do not overlap (~24 px each).
    const int every = std::max(1, static_cast<int>(std::ceil(24.0 / bar)));
    for (int rk = 0; rk < shown; rk += every) {
      absl::StrAppend(&s, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
                                          "%d</text>\n",
                                          left + (rk + 0.5) * bar, y0 + chart + 14, rk));
    }
    absl::StrAppend(&s, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
                                        "rank</text>\n",
                                        left + plot_w / 2, y0 + chart + 28));
  };
  axis(y_ms, max_ms, false, "predicted embedding time per rank (ms per step)");
  axis(y_mem, max_mem, true,
       absl::StrCat("predicted ", MemKindName(MemKind(kind)), " memory per rank"));
  const char* colors[] = {"#4c78a8", "#f58518", "#54a24b", "#b279a2"};
  const char* names[] = {"lookup", "embedding update", "input + output + backward dist",
                         "replica sync + tier misses"};
  for (int rk = 0; rk < shown; ++rk) {
    const PhaseTimes& p = e.per_rank[rk];
    const double parts[4] = {1e3 * p.s[kLookup], 1e3 * p.s[kEmbeddingUpdate],
                             1e3 * (p.s[kInputDist] + p.s[kOutputDist] + p.s[kBackwardDist]),
                             1e3 * (p.s[kReplicaSync] + p.s[kTierMisses])};
    double y = y_ms + chart;
    const double x = left + rk * bar;
    for (int k = 0; k < 4; ++k) {
      const double h = chart * parts[k] / max_ms;
      y -= h;
      absl::StrAppend(
          &s, absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                              "height=\"%.1f\" fill=\"%s\"><title>rank %d %s: %.3f "
                              "ms</title></rect>\n",
                              x, y, std::max(0.5, bar - 1), h, colors[k], rk, names[k], parts[k]));
    }
    const double mh = chart * e.memory[rk][kind] / max_mem;
    absl::StrAppend(&s, absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                                        "height=\"%.1f\" fill=\"#72b7b2\"><title>rank %d: %s"
                                        "</title></rect>\n",
                                        x, y_mem + chart - mh, std::max(0.5, bar - 1), mh, rk,
                                        FormatBytes(e.memory[rk][kind])));
  }
  if (limit > 0) {
    const double ly = y_mem + chart - chart * limit / max_mem;
    absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                                        "stroke=\"red\" stroke-dasharray=\"4 2\"/>\n",
                                        left, ly, left + plot_w, ly));
  }
  // Legend: one swatch per series, wrapped to the canvas width.
  double lx = 10, ly = height - 30;
  auto legend = [&](const char* color, const std::string& label, bool dashed) {
    const double w = 26 + 6.2 * label.size();
    if (lx + w > width - 10) {
      lx = 10;
      ly += 16;
    }
    if (dashed) {
      absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
                                          "stroke=\"%s\" stroke-dasharray=\"4 2\"/>\n",
                                          lx, ly - 4, lx + 14, ly - 4, color));
    } else {
      absl::StrAppend(&s, absl::StrFormat("<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" "
                                          "height=\"10\" fill=\"%s\"/>\n",
                                          lx, ly - 9, color));
    }
    absl::StrAppend(&s,
                    absl::StrFormat("<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", lx + 18, ly, label));
    lx += w;
  };
  for (int k = 0; k < 4; ++k) legend(colors[k], names[k], false);
  legend("#72b7b2", "memory", false);
  if (limit > 0) legend("red", "memory limit", true);
  absl::StrAppend(&s, "</svg>\n");
  return s;
}

}  // namespace tessera::planner
