// The MLPerf DLRM-DCNv2 reference's preprocessed Criteo 1TB data, as TorchRec writes it
// (torchrec/datasets/criteo.py BinaryCriteoUtils, and the MLPerf training repo's
// recommendation_v2/torchrec_dlrm/scripts/materialize_synthetic_multihot_dataset.py).
// docs/DATA.md "MLPerf NumPy days" and docs/FORMATS.md are the reference.
//
// One day d is three arrays in a folder:
//   day_<d>_dense.npy              float32 [N, 13]   already transformed (TorchRec: log(x + 3))
//   day_<d>_labels.npy             int32   [N, 1]    0 or 1 ([N] and int64/float32/bool accepted)
//   one-hot:   day_<d>_sparse.npy  int32   [N, 26]   one id per feature
//   multi-hot: day_<d>_sparse_multi_hot.npz          np.savez archive of "0.npy" .. "25.npy",
//                                  int32   [N, h_k]  h_k ids per bag for feature k
// (int64 ids are accepted too; C or Fortran order). The multi-hot archive is used when it exists,
// else the one-hot file; every day of a stream must have the same layout and the same h_k.
// Ids are reduced as TorchRec does, `id mod rows_per_feature[k]` with numpy's sign rule (the
// result is in [0, rows) also for negative ids, which raw tsv_to_npys output holds for hex
// values >= 2^31).
//
// The days, in the order given, are one stream of N rows. `split` takes part of it, as TorchRec's
// "val"/"test" stages do with the last day: val = the first ceil(N/2) rows, test = the rest.
// Shard s of S then reads the contiguous range [L*s/S, L*(s+1)/S) of the L rows of the split
// (the convention of every Tessera reader; TorchRec's ranks also read contiguous ranges).
//
// Files are memory-mapped, never loaded: opening a day reads its headers only. Bad files fail
// Open with one message naming the file: a day missing (NotFound), a wrong dtype, a shape that
// does not match the model or the day's other files, a truncated file (DataLoss /
// InvalidArgument). A label other than 0/1 is a DataLoss naming the file and row at Next.
// Thread-safety: one consumer (BatchReader); PrefetchingReader moves it onto a thread.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/enum_names.h"
#include "io/reader.h"

namespace tessera {

// Which part of the stream a reader reads.
enum class MlperfSplit { kAll, kVal, kTest };
// "all" | "val" | "test"; InvalidArgument naming the value otherwise.
inline constexpr EnumName<MlperfSplit> kMlperfSplitNames[] = {
    {MlperfSplit::kAll, "all"}, {MlperfSplit::kVal, "val"}, {MlperfSplit::kTest, "test"}};
inline absl::StatusOr<MlperfSplit> ParseMlperfSplit(absl::string_view name) {
  return ParseIn(kMlperfSplitNames, name, "split");
}
inline const char* MlperfSplitName(MlperfSplit split) { return NameIn(kMlperfSplitNames, split); }

// "0-22", "23", "0,2,5-7": the days in that order. InvalidArgument for anything else (empty,
// negative, a range that runs backwards).
absl::StatusOr<std::vector<int>> ParseDayList(absl::string_view text);

// The file of a day: DayFilePath("/d", 3, "dense.npy") == "/d/day_3_dense.npy".
std::string DayFilePath(const std::string& dir, int day, absl::string_view suffix);

// rows_per_feature[k] for a feature whose ids stay raw 64-bit keys (a dynamic table's): int32
// ids read as their 32-bit pattern, uint32 and int64 ids as stored.
inline constexpr int64_t kMlperfRawIds = std::numeric_limits<int64_t>::max();

struct MlperfNpyOptions {
  // The folder holding day_<d>_*.npy files. Required.
  std::string dir;
  // Days read in this order as one stream. Required (at least one).
  std::vector<int> days;
  // Samples per batch (the last batch of a shard may be smaller). Default: 2048.
  int64_t batch_size = 2048;
  // Rows of each feature's table; ids are reduced mod these (kMlperfRawIds: kept as stored, for
  // a dynamic table's feature). Its size must equal the files' feature count. Required.
  std::vector<int64_t> rows_per_feature;
  // Dense columns the model expects; the dense files must have exactly this many. Default: 13.
  int64_t num_dense = 13;
  // The part of the stream to read. Default: kAll.
  MlperfSplit split = MlperfSplit::kAll;
  // This reader's contiguous slice of the split: shard_index in [0, num_shards). Default: 0 of 1.
  int shard_index = 0;
  int num_shards = 1;
};

class MlperfNpyReader : public BatchReader {
 public:
  // Maps every day's files and checks their headers against each other and the options.
  static absl::StatusOr<std::unique_ptr<MlperfNpyReader>> Open(MlperfNpyOptions options);
  ~MlperfNpyReader() override;

  // dense [B, num_dense] as stored, labels [B], and one feature per sparse column with h_k ids
  // per bag (1 for one-hot data).
  absl::StatusOr<bool> Next(Batch* batch) override;
  absl::Status Rewind() override;
  ReaderStats stats() const override;

  // Rows in this shard and in the split.
  int64_t num_records() const;
  int64_t split_records() const;
  // True when the days are multi-hot archives; ids per bag per feature (all 1 for one-hot).
  bool multi_hot() const;
  const std::vector<int64_t>& ids_per_bag() const;

 private:
  struct State;
  explicit MlperfNpyReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera
