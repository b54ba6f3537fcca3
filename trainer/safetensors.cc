#include "trainer/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/escape.h"
#include "core/status.h"
#include "trainer/internal/safetensors_json.h"

namespace tessera {
namespace {

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length field
// must not make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

absl::Status Errno(absl::string_view what, const std::string& path) {
  int e = errno;
  std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  return e == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
}

bool ParseDtype(std::string_view s, SafetensorsDtype* out) {
  for (auto d : {SafetensorsDtype::kF32, SafetensorsDtype::kF16, SafetensorsDtype::kBF16,
                 SafetensorsDtype::kI64, SafetensorsDtype::kI32, SafetensorsDtype::kU64,
                 SafetensorsDtype::kU16}) {
    if (DtypeName(d) == s) {
      *out = d;
      return true;
    }
  }
  return false;
}

// Debian's Abseil has its own string_view (not std::string_view); StrCat needs this bridge.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Writes all `n` bytes at `off`, retrying short writes and EINTR.
absl::Status PwriteAll(int fd, const std::string& path, int64_t off, const void* data, int64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::pwrite(fd, p, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)), off);
    if (k < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    p += k;
    off += k;
    n -= k;
  }
  return absl::OkStatus();
}

// The folder holding `path` ("." for a bare file name).
std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Product of dims, or -1 on overflow.
int64_t CheckedElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 16 / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

int64_t DtypeSize(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32: return 4;
    case SafetensorsDtype::kF16: return 2;
    case SafetensorsDtype::kBF16: return 2;
    case SafetensorsDtype::kI64: return 8;
    case SafetensorsDtype::kI32: return 4;
    case SafetensorsDtype::kU64: return 8;
    case SafetensorsDtype::kU16: return 2;
  }
  return 0;
}

std::string_view DtypeName(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32: return "F32";
    case SafetensorsDtype::kF16: return "F16";
    case SafetensorsDtype::kBF16: return "BF16";
    case SafetensorsDtype::kI64: return "I64";
    case SafetensorsDtype::kI32: return "I32";
    case SafetensorsDtype::kU64: return "U64";
    case SafetensorsDtype::kU16: return "U16";
  }
  return "?";
}

int64_t TensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Writer

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<TensorSpec> tensors,
    const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->tmp_path_ = path + ".tmp";

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      internal::AppendJsonString(k, &header);
      header += ':';
      internal::AppendJsonString(v, &header);
    }
    header += '}';
  }
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__")
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": invalid tensor name '", EscapeBytes(t.name), "'"));
    if (i > 0 && tensors[i - 1].name == t.name)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", EscapeBytes(t.name), "' declared twice"));
    if (CheckedElements(t.shape) < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", EscapeBytes(t.name), "': negative or overflowing shape"));
    int64_t bytes = t.num_bytes();
    if (header.size() > 1) header += ',';
    internal::AppendJsonString(t.name, &header);
    header += absl::StrCat(":{\"dtype\":\"", Av(DtypeName(t.dtype)), "\",\"shape\":[");
    for (size_t d = 0; d < t.shape.size(); ++d)
      absl::StrAppend(&header, d ? "," : "", t.shape[d]);
    absl::StrAppend(&header, "],\"data_offsets\":[", offset, ",", offset + bytes, "]}");
    Entry& entry = w->entries_[t.name];
    entry.begin = offset;
    entry.size = bytes;
    offset += bytes;
  }
  header += '}';
  // Padding to 8 bytes puts the data section at an 8-aligned file offset (as the reference
  // writer does), so an mmap of an all-F32 file gives aligned floats.
  header.append((8 - header.size() % 8) % 8, ' ');
  const int64_t data_start = 8 + static_cast<int64_t>(header.size());
  for (auto& [name, e] : w->entries_) e.begin += data_start;
  w->tensors_ = std::move(tensors);

  w->fd_ = ::open(w->tmp_path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Errno("cannot create", w->tmp_path_);
  // Size the file first so tensors can be written at their offsets in any order.
  if (::ftruncate(w->fd_, data_start + offset) != 0) return Errno("ftruncate", w->tmp_path_);
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  std::string prefix(reinterpret_cast<const char*>(len), 8);
  prefix += header;
  // On error the destructor removes the tmp file.
  TESSERA_RETURN_IF_ERROR(
      PwriteAll(w->fd_, w->tmp_path_, 0, prefix.data(), static_cast<int64_t>(prefix.size())));
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) RemoveTmp();
}

void SafetensorsWriter::RemoveTmp() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

absl::Status SafetensorsWriter::Fail(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) error_ = status;
  return status;
}

absl::Status SafetensorsWriter::Write(std::string_view name, int64_t offset, const void* data,
                                      int64_t num_bytes) {
  if (finished_) return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  int64_t file_offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(name);
    if (it == entries_.end())
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": no tensor '", EscapeBytes(name), "' was declared"));
    Entry& e = it->second;
    if (offset < 0 || num_bytes < 0 || offset + num_bytes > e.size)
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", Av(name), "': bytes [",
                                                     offset, ", ", offset + num_bytes,
                                                     ") outside its ", e.size, " bytes"));
    if (num_bytes == 0) return absl::OkStatus();
    const int64_t end = offset + num_bytes;
    // The first range starting at or after `end` and the one before it are the only candidates
    // for overlap, since stored ranges are disjoint and merged.
    auto next = e.written.lower_bound(end);
    if (next != e.written.begin()) {
      auto prev = std::prev(next);
      if (prev->second > offset)
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ": tensor '", Av(name), "': bytes [", offset, ", ", end,
            ") overlap bytes already written [", prev->first, ", ", prev->second, ")"));
    }
    // Insert and merge with touching neighbours.
    int64_t b = offset, en = end;
    if (next != e.written.end() && next->first == en) {
      en = next->second;
      next = e.written.erase(next);
    }
    if (next != e.written.begin()) {
      auto prev = std::prev(next);
      if (prev->second == b) {
        b = prev->first;
        e.written.erase(prev);
      }
    }
    e.written[b] = en;
    e.written_bytes += num_bytes;
    file_offset = e.begin + offset;
  }
  absl::Status st = PwriteAll(fd_, tmp_path_, file_offset, data, num_bytes);
  return st.ok() ? st : Fail(st);
}

absl::Status SafetensorsWriter::WriteTensor(std::string_view name, const void* data) {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": no tensor '", EscapeBytes(name), "' was declared"));
  return Write(name, 0, data, it->second.size);
}

absl::Status SafetensorsWriter::WriteRows(std::string_view name, int64_t row_begin,
                                          int64_t row_end, const void* data) {
  auto it = std::find_if(tensors_.begin(), tensors_.end(),
                         [&](const TensorSpec& t) { return t.name == name; });
  if (it == tensors_.end())
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": no tensor '", EscapeBytes(name), "' was declared"));
  if (it->shape.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", Av(name), "' is a scalar; it has no rows"));
  const int64_t rows = it->shape[0];
  if (row_begin < 0 || row_end < row_begin || row_end > rows)
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", Av(name), "': rows [",
                                                   row_begin, ", ", row_end, ") outside its ",
                                                   rows, " rows"));
  const int64_t row_bytes = rows == 0 ? 0 : it->num_bytes() / rows;
  return Write(name, row_begin * row_bytes, data, (row_end - row_begin) * row_bytes);
}

absl::Status SafetensorsWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  absl::Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = error_;
  }
  for (const TensorSpec& t : tensors_) {
    if (!st.ok()) break;
    const Entry& e = entries_.find(t.name)->second;
    if (e.written_bytes != e.size)
      st = absl::FailedPreconditionError(absl::StrCat(path_, ": tensor '", EscapeBytes(t.name),
                                                      "' has ", e.written_bytes, " of ", e.size,
                                                      " bytes written"));
  }
  if (st.ok() && ::fsync(fd_) != 0) st = Errno("fsync", tmp_path_);
  if (st.ok()) {
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) st = Errno("close", tmp_path_);
  }
  if (st.ok() && ::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    st = Errno("rename onto " + path_, tmp_path_);
  if (!st.ok()) {
    RemoveTmp();
    finished_ = true;  // nothing more to clean up
    return st;
  }
  finished_ = true;
  // Make the rename itself durable. A failure here leaves a complete file, so it is not an error.
  std::string dir = DirName(path_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                              const std::vector<const void*>& data,
                              const std::map<std::string, std::string>& metadata) {
  TESSERA_CHECK(tensors.size() == data.size())
      << tensors.size() << " tensors vs " << data.size() << " data pointers";
  TESSERA_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, tensors, metadata));
  for (size_t i = 0; i < tensors.size(); ++i)
    TESSERA_RETURN_IF_ERROR(writer->WriteTensor(tensors[i].name, data[i]));
  return writer->Finish();
}

// ---------------------------------------------------------------------------------------------
// Reader

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = Errno("fstat", path);
    ::close(fd);
    return s;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": ", size,
                                            " bytes is too short for a safetensors file"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) return Errno("mmap", path);
  f->map_ = map;
  f->map_size_ = size;
  TESSERA_RETURN_IF_ERROR(f->Parse(std::string_view(static_cast<const char*>(map), size)));
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(
    std::string_view bytes, std::string source_name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(source_name);
  TESSERA_RETURN_IF_ERROR(f->Parse(bytes));
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

absl::Status SafetensorsFile::Parse(std::string_view bytes) {
  auto loss = [&](auto&&... parts) {
    return absl::DataLossError(absl::StrCat(path_, ": ", parts...));
  };
  if (bytes.size() < 8)
    return loss(bytes.size(), " bytes is too short for a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > kMaxHeaderBytes) return loss("header length ", n, " exceeds the 100 MB limit");
  if (n > bytes.size() - 8)
    return loss("header length ", n, " exceeds the file size ", bytes.size());
  internal::Json root;
  absl::Status st = internal::ParseJson(bytes.substr(8, n), &root);
  if (!st.ok()) return loss(st.message());
  if (root.kind != internal::Json::kObject) return loss("header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  struct Pending {
    TensorView view;
    uint64_t begin, end;
  };
  std::vector<Pending> pending;
  for (const internal::Json::Member& member : root.members) {
    // Plain references, not a structured binding: clang 14 cannot capture one in a lambda.
    const std::string& name = member.key;
    const internal::Json& value = member.value;
    if (name == "__metadata__") {
      if (value.kind != internal::Json::kObject) return loss("__metadata__ is not an object");
      for (const auto& [k, v] : value.members) {
        if (v.kind != internal::Json::kString)
          return loss("__metadata__: value of '", EscapeBytes(k), "' is not a string");
        metadata_[k] = v.str;
      }
      continue;
    }
    // Names and strings from the file are escaped in messages (no control bytes on a terminal).
    auto bad = [&](auto&&... parts) {
      return loss("tensor '", EscapeBytes(name), "': ", parts...);
    };
    if (value.kind != internal::Json::kObject) return bad("entry is not an object");
    const internal::Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, v] : value.members) {
      if (k == "dtype") dtype = &v;
      else if (k == "shape") shape = &v;
      else if (k == "data_offsets") offsets = &v;
      else return bad("unknown field '", EscapeBytes(k), "'");
    }
    if (dtype == nullptr || shape == nullptr || offsets == nullptr)
      return bad("needs dtype, shape and data_offsets");
    Pending p;
    p.view.name = name;
    if (dtype->kind != internal::Json::kString || !ParseDtype(dtype->str, &p.view.dtype))
      return bad("unsupported dtype '",
                 dtype->kind == internal::Json::kString ? EscapeBytes(dtype->str) : "?",
                 "' (Tessera reads F32, F16, BF16, I64, I32, U64, U16)");
    if (shape->kind != internal::Json::kArray) return bad("shape is not an array");
    for (const internal::Json& d : shape->items) {
      if (d.kind != internal::Json::kInt || d.num > (uint64_t{1} << 48))
        return bad("shape entries must be integers below 2^48");
      p.view.shape.push_back(static_cast<int64_t>(d.num));
    }
    if (offsets->kind != internal::Json::kArray || offsets->items.size() != 2 ||
        offsets->items[0].kind != internal::Json::kInt ||
        offsets->items[1].kind != internal::Json::kInt)
      return bad("data_offsets must be [begin, end]");
    p.begin = offsets->items[0].num;
    p.end = offsets->items[1].num;
    if (p.begin > p.end) return bad("data_offsets [", p.begin, ", ", p.end, "] decrease");
    if (p.end > data_size)
      return bad("data_offsets [", p.begin, ", ", p.end, "] run past the data section (",
                 data_size, " bytes)");
    int64_t elements = CheckedElements(p.view.shape);
    if (elements < 0) return bad("shape overflows");
    const uint64_t want = static_cast<uint64_t>(elements * DtypeSize(p.view.dtype));
    if (want != p.end - p.begin)
      return bad("shape and dtype ", Av(DtypeName(p.view.dtype)), " need ", want,
                 " bytes but data_offsets span ", p.end - p.begin);
    p.view.data = data + p.begin;
    p.view.num_bytes = static_cast<int64_t>(want);
    pending.push_back(std::move(p));
  }
  // The data section must be exactly the tensors, back to back: no gaps (hidden bytes) and no
  // overlaps (two tensors aliasing each other).
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  for (const Pending& p : pending) {
    if (p.begin != pos)
      return loss("tensor '", EscapeBytes(p.view.name), "': starts at data byte ", p.begin,
                  " but the previous tensor ends at ", pos,
                  p.begin < pos ? " (overlap)" : " (gap); data must be contiguous");
    pos = p.end;
  }
  if (pos != data_size)
    return loss("tensors cover ", pos, " bytes but the data section holds ", data_size);
  for (Pending& p : pending) {
    // A header that is not padded to 8 bytes (or an odd-sized tensor before this one) leaves the
    // data misaligned for its dtype; reading a float through such a pointer is undefined, so the
    // tensor is copied into memory of its own, aligned for every dtype.
    const auto addr = reinterpret_cast<uintptr_t>(p.view.data);
    if (addr % static_cast<uintptr_t>(DtypeSize(p.view.dtype)) != 0) {
      const size_t words = (static_cast<size_t>(p.view.num_bytes) + 7) / 8;
      std::unique_ptr<uint64_t[]> copy(new (std::nothrow) uint64_t[words]);
      if (copy == nullptr)
        return absl::ResourceExhaustedError(absl::StrCat(
            path_, ": tensor '", EscapeBytes(p.view.name), "': cannot allocate ", p.view.num_bytes,
            " bytes for an aligned copy of its misaligned data"));
      std::memcpy(copy.get(), p.view.data, static_cast<size_t>(p.view.num_bytes));
      p.view.data = copy.get();
      aligned_copies_.push_back(std::move(copy));
    }
    index_[p.view.name] = tensors_.size();
    tensors_.push_back(std::move(p.view));
  }
  return absl::OkStatus();
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const TensorView*> SafetensorsFile::Get(std::string_view name,
                                                       SafetensorsDtype dtype,
                                                       const std::vector<int64_t>& shape) const {
  const TensorView* t = Find(name);
  if (t == nullptr)
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", EscapeBytes(name), "'"));
  auto shape_str = [](const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&out, i ? ", " : "", s[i]);
    return out + "]";
  };
  if (t->dtype != dtype || t->shape != shape)
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor '", EscapeBytes(name), "' is ", Av(DtypeName(t->dtype)), " ",
        shape_str(t->shape), ", expected ", Av(DtypeName(dtype)), " ", shape_str(shape)));
  return t;
}

}  // namespace tessera
