#include "trainer/trace_writer.h"

#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/trace.h"

namespace tessera {

absl::Status StartStepTrace(Communicator* comm, int64_t max_events_per_thread) {
  (void)trace::Take();  // nothing from before the window
  if (comm != nullptr) TESSERA_RETURN_IF_ERROR(comm->Barrier());
  trace::SetOrigin();
  trace::Start(max_events_per_thread);
  return absl::OkStatus();
}

absl::StatusOr<std::string> GatherStepTrace(Communicator* comm, const std::string& other_data) {
  trace::Stop();
  int64_t dropped = 0;
  const int rank = comm != nullptr ? comm->rank() : 0;
  std::string mine = trace::EventsJson(trace::Take(&dropped), rank);
  std::vector<std::string> all;
  int64_t dropped_all = dropped;
  if (comm == nullptr || comm->size() == 1) {
    all.push_back(std::move(mine));
  } else {
    const int p = comm->size();
    std::vector<int64_t> sizes(p), drops(p);
    TESSERA_RETURN_IF_ERROR(
        comm->AllGatherCounts(static_cast<int64_t>(mine.size()), absl::MakeSpan(sizes)));
    TESSERA_RETURN_IF_ERROR(comm->AllGatherCounts(dropped, absl::MakeSpan(drops)));
    std::vector<int64_t> displs(p);
    int64_t total = 0;
    for (int r = 0; r < p; ++r) {
      displs[r] = total;
      total += sizes[r];
    }
    std::string buf(static_cast<size_t>(total), '\0');
    TESSERA_RETURN_IF_ERROR(
        comm->AllGatherV(mine.data(), static_cast<int64_t>(mine.size()), buf.data(), sizes, displs));
    dropped_all = 0;
    for (int r = 0; r < p; ++r) {
      all.push_back(buf.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(sizes[r])));
      dropped_all += drops[r];
    }
  }
  if (rank != 0) return std::string();
  std::string text = "{\"traceEvents\": [\n";
  for (size_t r = 0; r < all.size(); ++r) absl::StrAppend(&text, r ? ",\n" : "", all[r]);
  absl::StrAppend(&text, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"ranks\": ",
                  all.size(), ", \"dropped_events\": ", dropped_all,
                  other_data.empty() ? "" : ", ", other_data, "}}\n");
  return text;
}

absl::Status WriteTraceFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return absl::InvalidArgumentError(absl::StrCat("--trace: cannot write ", path));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InvalidArgumentError(absl::StrCat("--trace: cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace tessera
