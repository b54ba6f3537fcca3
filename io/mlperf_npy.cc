#include "io/mlperf_npy.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "io/internal/mapped_file.h"
#include "io/internal/npz.h"
#include "io/internal/reader_checks.h"
#include "io/npy.h"

namespace tessera {

using io_internal::MappedFile;

namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// An array as a strided 2-D view: element (r, c) is at data + (r * row_stride + c * col_stride)
// elements. A 1-D array is [N, 1].
struct Matrix {
  NpyArray array;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0;
};

absl::StatusOr<Matrix> AsMatrix(NpyArray a, const char* what, bool allow_1d) {
  const size_t nd = a.shape.size();
  if (!(nd == 2 || (allow_1d && nd == 1))) {
    return absl::InvalidArgumentError(absl::StrCat(a.name, ": shape ", a.ShapeString(), ", ", what,
                                                   " must be 2-D [rows, columns]"));
  }
  Matrix m;
  m.rows = a.shape[0];
  m.cols = nd == 2 ? a.shape[1] : 1;
  m.row_stride = a.fortran_order ? 1 : m.cols;
  m.col_stride = a.fortran_order ? m.rows : 1;
  m.array = std::move(a);
  return m;
}

absl::Status WrongDtype(const NpyArray& a, const char* what, const char* expected) {
  return absl::InvalidArgumentError(absl::StrCat(a.name, ": dtype ", NpyDtypeName(a.dtype), " ('",
                                                 NpyDtypeDescr(a.dtype), "'), ", what,
                                                 " must be ", expected));
}

absl::Status RowsDiffer(const Matrix& m, const Matrix& dense) {
  return absl::InvalidArgumentError(
      absl::StrCat(m.array.name, ": ", m.rows, " rows, but ", dense.array.name, " has ",
                   dense.rows, " (a day's dense, labels and sparse files must have the same rows)"));
}

bool IsIdType(NpyDtype d) {
  return d == NpyDtype::kInt32 || d == NpyDtype::kInt64 || d == NpyDtype::kUInt32;
}

template <typename T>
inline T LoadAt(const char* base, int64_t element) {
  T v;
  std::memcpy(&v, base + element * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// out[r * h + j] = reduce(m(r0 + r, c0 + j)) for r < n, j < h: numpy's `id % rows` (the result
// takes the divisor's sign, so it lies in [0, rows)).
// With rows == kMlperfRawIds (a dynamic table's feature) the ids are kept as stored: int32 as
// its 32-bit pattern (the hex value tsv_to_npys wrote), uint32 and int64 as they are.
template <typename T, bool kRaw>
void CopyIds(const Matrix& m, int64_t r0, int64_t n, int64_t c0, int64_t h, int64_t rows,
             int64_t* out) {
  const char* base = m.array.data;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row = (r0 + r) * m.row_stride;
    for (int64_t j = 0; j < h; ++j) {
      const T x = LoadAt<T>(base, row + (c0 + j) * m.col_stride);
      if constexpr (kRaw) {
        out[r * h + j] = std::is_same_v<T, int32_t>
                             ? static_cast<int64_t>(static_cast<uint32_t>(x))
                             : static_cast<int64_t>(x);
        continue;
      }
      int64_t v = static_cast<int64_t>(x);
      if (static_cast<uint64_t>(v) >= static_cast<uint64_t>(rows)) {
        v %= rows;
        if (v < 0) v += rows;
      }
      out[r * h + j] = v;
    }
  }
}

void CopyIdsAny(const Matrix& m, int64_t r0, int64_t n, int64_t c0, int64_t h, int64_t rows,
                int64_t* out) {
  if (rows == kMlperfRawIds) {
    switch (m.array.dtype) {
      case NpyDtype::kInt32:
        return CopyIds<int32_t, true>(m, r0, n, c0, h, rows, out);
      case NpyDtype::kUInt32:
        return CopyIds<uint32_t, true>(m, r0, n, c0, h, rows, out);
      default:
        return CopyIds<int64_t, true>(m, r0, n, c0, h, rows, out);
    }
  }
  switch (m.array.dtype) {
    case NpyDtype::kInt32:
      return CopyIds<int32_t, false>(m, r0, n, c0, h, rows, out);
    case NpyDtype::kUInt32:
      return CopyIds<uint32_t, false>(m, r0, n, c0, h, rows, out);
    default:
      return CopyIds<int64_t, false>(m, r0, n, c0, h, rows, out);
  }
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseDayList(absl::string_view text) {
  std::vector<int> days;
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("days '", text, "': ", why,
                                                   " (expected e.g. 0-22, 23 or 0,3,5-7)"));
  };
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) return bad("an empty entry");
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int a, b;
    if (!absl::SimpleAtoi(ends[0], &a) || a < 0) return bad(absl::StrCat("'", part, "'"));
    b = a;
    if (ends.size() == 2 && (!absl::SimpleAtoi(ends[1], &b) || b < a)) {
      return bad(absl::StrCat("'", part, "' is not a range a-b with a <= b"));
    }
    if (b - a > 100000) return bad("a range of more than 100000 days");
    for (int d = a; d <= b; ++d) days.push_back(d);
  }
  return days;
}

std::string DayFilePath(const std::string& dir, int day, absl::string_view suffix) {
  std::string d = dir;
  if (!d.empty() && d.back() != '/') d += '/';
  return absl::StrCat(d, "day_", day, "_", suffix);
}

struct MlperfNpyReader::State {
  struct Day {
    MappedFile dense_map, labels_map, sparse_map;
    Matrix dense, labels;
    std::vector<Matrix> sparse;  // multi-hot: one per feature; one-hot: one [N, F]
    int64_t first = 0;           // stream index of row 0
  };
  MlperfNpyOptions options;
  std::vector<Day> days;
  bool multi_hot = false;
  std::vector<int64_t> hot;        // ids per bag, per feature
  std::vector<int64_t> value_off;  // per feature: the first value of its block, per sample
  int64_t total = 0, split_begin = 0, split_end = 0, begin = 0, end = 0, next = 0;
  ReaderStats stats;

  absl::Status OpenDay(int day_number);
};

absl::Status MlperfNpyReader::State::OpenDay(int day_number) {
  const std::string& dir = options.dir;
  const int64_t num_features = static_cast<int64_t>(options.rows_per_feature.size());
  Day day;
  const std::string dense_path = DayFilePath(dir, day_number, "dense.npy");
  const std::string labels_path = DayFilePath(dir, day_number, "labels.npy");
  const std::string onehot_path = DayFilePath(dir, day_number, "sparse.npy");
  const std::string multi_path = DayFilePath(dir, day_number, "sparse_multi_hot.npz");
  const auto open = [&](const std::string& path) -> absl::StatusOr<MappedFile> {
    auto m = MappedFile::Open(path);
    if (!m.ok() && absl::IsNotFound(m.status())) {
      return absl::NotFoundError(absl::StrCat(path, ": not found (day ", day_number, " of ",
                                              dir, ")"));
    }
    return m;
  };
  TESSERA_ASSIGN_OR_RETURN(day.dense_map, open(dense_path));
  TESSERA_ASSIGN_OR_RETURN(day.labels_map, open(labels_path));
  TESSERA_ASSIGN_OR_RETURN(NpyArray dense,
                           ParseNpy(dense_path, day.dense_map.data(), day.dense_map.size()));
  TESSERA_ASSIGN_OR_RETURN(NpyArray labels,
                           ParseNpy(labels_path, day.labels_map.data(), day.labels_map.size()));
  if (dense.dtype != NpyDtype::kFloat32) return WrongDtype(dense, "dense features", "float32");
  TESSERA_ASSIGN_OR_RETURN(day.dense, AsMatrix(std::move(dense), "dense", false));
  if (day.dense.cols != options.num_dense) {
    return absl::InvalidArgumentError(absl::StrCat(dense_path, ": ", day.dense.cols,
                                                   " dense columns, the model has ",
                                                   options.num_dense));
  }
  switch (labels.dtype) {
    case NpyDtype::kInt32: case NpyDtype::kInt64: case NpyDtype::kFloat32:
    case NpyDtype::kBool: case NpyDtype::kInt8: case NpyDtype::kUInt8:
      break;
    default:
      return WrongDtype(labels, "labels", "int32 (or int64, float32, bool, int8, uint8)");
  }
  TESSERA_ASSIGN_OR_RETURN(day.labels, AsMatrix(std::move(labels), "labels", true));
  if (day.labels.cols != 1) {
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": shape ",
                                                   day.labels.array.ShapeString(),
                                                   ", labels must be [rows, 1] or [rows]"));
  }
  if (day.labels.rows != day.dense.rows) return RowsDiffer(day.labels, day.dense);

  // The sparse layout: fixed by the first day, then required of every later one.
  const bool have_multi = Exists(multi_path);
  if (days.empty()) multi_hot = have_multi;
  if (multi_hot && !have_multi) {
    return absl::NotFoundError(absl::StrCat(multi_path, ": not found (day ", day_number, " of ",
                                            dir, "; the first day is multi-hot)"));
  }
  if (multi_hot) {
    TESSERA_ASSIGN_OR_RETURN(day.sparse_map, open(multi_path));
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<io_internal::ZipMember> members,
        io_internal::ListZipMembers(multi_path, day.sparse_map.data(), day.sparse_map.size()));
    if (static_cast<int64_t>(members.size()) != num_features) {
      return absl::InvalidArgumentError(absl::StrCat(multi_path, ": ", members.size(),
                                                     " arrays, the model has ", num_features,
                                                     " sparse features (0.npy .. ",
                                                     num_features - 1, ".npy)"));
    }
    day.sparse.resize(num_features);
    std::vector<bool> seen(num_features, false);
    for (const io_internal::ZipMember& mem : members) {
      int k = -1;
      absl::string_view stem(mem.name);
      if (stem.size() > 4 && stem.substr(stem.size() - 4) == ".npy") stem.remove_suffix(4);
      if (!absl::SimpleAtoi(stem, &k) || k < 0 || k >= num_features || seen[k]) {
        return absl::InvalidArgumentError(absl::StrCat(
            multi_path, ": member '", mem.name, "' is not one of 0.npy .. ", num_features - 1,
            ".npy (once each)"));
      }
      seen[k] = true;
      const std::string name = absl::StrCat(multi_path, ":", mem.name);
      TESSERA_ASSIGN_OR_RETURN(
          NpyArray a, ParseNpy(name, day.sparse_map.data() + mem.offset, mem.size));
      if (!IsIdType(a.dtype)) return WrongDtype(a, "multi-hot ids", "int32 (or int64, uint32)");
      TESSERA_ASSIGN_OR_RETURN(day.sparse[k], AsMatrix(std::move(a), "multi-hot ids", false));
      if (day.sparse[k].rows != day.dense.rows) return RowsDiffer(day.sparse[k], day.dense);
      if (day.sparse[k].cols < 1) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": 0 ids per bag"));
      }
      if (!days.empty() && day.sparse[k].cols != hot[k]) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": ", day.sparse[k].cols, " ids per bag, but day ", options.days[0], " has ",
            hot[k], " (every day must have the same multi-hot sizes)"));
      }
    }
    if (days.empty()) {
      for (const Matrix& m : day.sparse) hot.push_back(m.cols);
    }
  } else {
    TESSERA_ASSIGN_OR_RETURN(day.sparse_map, open(onehot_path));
    TESSERA_ASSIGN_OR_RETURN(
        NpyArray a, ParseNpy(onehot_path, day.sparse_map.data(), day.sparse_map.size()));
    if (!IsIdType(a.dtype)) return WrongDtype(a, "sparse ids", "int32 (or int64, uint32)");
    day.sparse.resize(1);
    TESSERA_ASSIGN_OR_RETURN(day.sparse[0], AsMatrix(std::move(a), "sparse ids", false));
    if (day.sparse[0].cols != num_features) {
      return absl::InvalidArgumentError(absl::StrCat(onehot_path, ": ", day.sparse[0].cols,
                                                     " sparse columns, the model has ",
                                                     num_features, " sparse features"));
    }
    if (day.sparse[0].rows != day.dense.rows) return RowsDiffer(day.sparse[0], day.dense);
    if (days.empty()) hot.assign(num_features, 1);
  }
  day.first = total;
  total += day.dense.rows;
  days.push_back(std::move(day));
  return absl::OkStatus();
}

MlperfNpyReader::MlperfNpyReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
MlperfNpyReader::~MlperfNpyReader() = default;

absl::StatusOr<std::unique_ptr<MlperfNpyReader>> MlperfNpyReader::Open(MlperfNpyOptions options) {
  if (options.days.empty()) return absl::InvalidArgumentError("no days given");
  TESSERA_RETURN_IF_ERROR(
      io_internal::CheckBatchAndShard(options.batch_size, options.shard_index, options.num_shards));
  if (options.rows_per_feature.empty()) {
    return absl::InvalidArgumentError("rows_per_feature is empty (one table size per feature)");
  }
  for (size_t k = 0; k < options.rows_per_feature.size(); ++k) {
    if (options.rows_per_feature[k] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows_per_feature[", k, "] = ", options.rows_per_feature[k]));
    }
  }
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  for (int d : state->options.days) TESSERA_RETURN_IF_ERROR(state->OpenDay(d));
  State& s = *state;
  const int64_t n = s.total;
  const int64_t half = (n + 1) / 2;  // ceil: TorchRec's val set is the first ceil(N/2) rows
  s.split_begin = s.options.split == MlperfSplit::kTest ? half : 0;
  s.split_end = s.options.split == MlperfSplit::kVal ? half : n;
  const int64_t len = s.split_end - s.split_begin;
  s.begin = s.split_begin + len * s.options.shard_index / s.options.num_shards;
  s.end = s.split_begin + len * (s.options.shard_index + 1) / s.options.num_shards;
  s.next = s.begin;
  return std::unique_ptr<MlperfNpyReader>(new MlperfNpyReader(std::move(state)));
}

absl::StatusOr<bool> MlperfNpyReader::Next(Batch* batch) {
  State& s = *state_;
  if (s.next >= s.end) return false;
  const int64_t n = std::min(s.options.batch_size, s.end - s.next);
  const int64_t nd = s.options.num_dense;
  const int num_features = static_cast<int>(s.hot.size());
  const std::vector<int64_t>& rows = s.options.rows_per_feature;

  // Check labels first, so a bad one leaves `batch` untouched.
  size_t d = 0;
  while (d + 1 < s.days.size() && s.days[d + 1].first <= s.next) ++d;
  const size_t first_day = d;
  for (int64_t i = s.next; i < s.next + n;) {
    const State::Day& day = s.days[d];
    const int64_t r0 = i - day.first, m = std::min(s.next + n - i, day.dense.rows - r0);
    const Matrix& l = day.labels;
    for (int64_t r = r0; r < r0 + m; ++r) {
      const int64_t e = r * l.row_stride;
      double v;
      switch (l.array.dtype) {
        case NpyDtype::kInt32: v = LoadAt<int32_t>(l.array.data, e); break;
        case NpyDtype::kInt64: v = static_cast<double>(LoadAt<int64_t>(l.array.data, e)); break;
        case NpyDtype::kFloat32: v = LoadAt<float>(l.array.data, e); break;
        case NpyDtype::kInt8: v = LoadAt<int8_t>(l.array.data, e); break;
        default: v = LoadAt<uint8_t>(l.array.data, e); break;
      }
      if (v != 0.0 && v != 1.0) {
        return absl::DataLossError(
            absl::StrCat(l.array.name, ": row ", r, ": label ", v, " is not 0 or 1"));
      }
    }
    i += m;
    ++d;
  }

  batch->batch_size = n;
  batch->num_dense = nd;
  batch->dense.resize(n * nd);
  batch->labels.resize(n);
  KeyedJagged& kj = batch->sparse;
  kj.num_features = num_features;
  kj.batch_size = n;
  kj.weights.clear();
  kj.offsets.resize(static_cast<size_t>(num_features) * n + 1);
  s.value_off.resize(num_features);
  int64_t values = 0;
  kj.offsets[0] = 0;
  for (int k = 0; k < num_features; ++k) {
    s.value_off[k] = values;
    int64_t* off = kj.offsets.data() + static_cast<int64_t>(k) * n;
    for (int64_t b = 1; b <= n; ++b) off[b] = values + b * s.hot[k];
    values += n * s.hot[k];
  }
  kj.values.resize(values);

  d = first_day;
  for (int64_t i = s.next; i < s.next + n;) {
    const State::Day& day = s.days[d];
    const int64_t r0 = i - day.first, m = std::min(s.next + n - i, day.dense.rows - r0);
    const int64_t b0 = i - s.next;
    const Matrix& dm = day.dense;
    float* dense_out = batch->dense.data() + b0 * nd;
    if (!dm.array.fortran_order) {
      std::memcpy(dense_out, dm.array.data + r0 * nd * 4, m * nd * 4);
    } else {
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < nd; ++c)
          dense_out[r * nd + c] = LoadAt<float>(dm.array.data, (r0 + r) + c * dm.col_stride);
    }
    const Matrix& l = day.labels;
    for (int64_t r = 0; r < m; ++r) {
      const int64_t e = (r0 + r) * l.row_stride;
      float v;
      switch (l.array.dtype) {
        case NpyDtype::kInt32: v = static_cast<float>(LoadAt<int32_t>(l.array.data, e)); break;
        case NpyDtype::kInt64: v = static_cast<float>(LoadAt<int64_t>(l.array.data, e)); break;
        case NpyDtype::kFloat32: v = LoadAt<float>(l.array.data, e); break;
        case NpyDtype::kInt8: v = LoadAt<int8_t>(l.array.data, e); break;
        default: v = LoadAt<uint8_t>(l.array.data, e); break;
      }
      batch->labels[b0 + r] = v;
    }
    for (int k = 0; k < num_features; ++k) {
      int64_t* out = kj.values.data() + s.value_off[k] + b0 * s.hot[k];
      if (s.multi_hot) {
        CopyIdsAny(day.sparse[k], r0, m, 0, s.hot[k], rows[k], out);
      } else {
        CopyIdsAny(day.sparse[0], r0, m, k, 1, rows[k], out);
      }
    }
    i += m;
    ++d;
  }
  s.next += n;
  s.stats.records += n;
  return true;
}

absl::Status MlperfNpyReader::Rewind() {
  state_->next = state_->begin;
  return absl::OkStatus();
}

ReaderStats MlperfNpyReader::stats() const { return state_->stats; }
int64_t MlperfNpyReader::num_records() const { return state_->end - state_->begin; }
int64_t MlperfNpyReader::split_records() const {
  return state_->split_end - state_->split_begin;
}
bool MlperfNpyReader::multi_hot() const { return state_->multi_hot; }
const std::vector<int64_t>& MlperfNpyReader::ids_per_bag() const { return state_->hot; }

}  // namespace tessera
