#include "trainer/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {
namespace {

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

// Protocol buffer wire format (protobuf.dev, "Encoding"): a key is (field << 3) | wire type;
// type 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32; little-endian fixed widths.
enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutKey(std::string* out, int field, WireType type) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | type);
}
template <typename T>
void PutFixed(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out->append(b, sizeof(T));
}
void PutBytes(std::string* out, int field, std::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

std::string EventHeader(double wall_time, int64_t step) {
  std::string e;
  PutKey(&e, 1, kFixed64);
  PutFixed(&e, wall_time);
  if (step != 0) {  // proto3 leaves default values out
    PutKey(&e, 2, kVarint);
    PutVarint(&e, static_cast<uint64_t>(step));
  }
  return e;
}

// A cursor over one message's bytes.
struct Reader {
  std::string_view in;
  bool ok = true;
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (in.empty()) break;
      const uint8_t b = static_cast<uint8_t>(in[0]);
      in.remove_prefix(1);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    ok = false;
    return 0;
  }
  std::string_view Bytes(size_t n) {
    if (n > in.size()) {
      ok = false;
      return {};
    }
    std::string_view b = in.substr(0, n);
    in.remove_prefix(n);
    return b;
  }
  template <typename T>
  T Fixed() {
    T v{};
    std::string_view b = Bytes(sizeof(T));
    if (ok) std::memcpy(&v, b.data(), sizeof(T));
    return v;
  }
  // Skips a field of `type` the decoder does not use.
  void Skip(uint64_t type) {
    if (type == kVarint) {
      Varint();
    } else if (type == kFixed64) {
      Bytes(8);
    } else if (type == kLengthDelimited) {
      Bytes(Varint());
    } else if (type == kFixed32) {
      Bytes(4);
    } else {
      ok = false;
    }
  }
};

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint32_t Crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (char ch : data) crc = kCrcTable[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string FrameTfRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  std::string len;
  PutFixed(&len, static_cast<uint64_t>(data.size()));
  out += len;
  PutFixed(&out, MaskCrc32c(Crc32c(len)));
  out.append(data);
  PutFixed(&out, MaskCrc32c(Crc32c(data)));
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseTfRecords(std::string_view file,
                                                        const std::string& source) {
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < file.size()) {
    auto bad = [&](const char* what) {
      return absl::DataLossError(absl::StrCat(source, ": record at byte ", offset, ": ", what));
    };
    if (file.size() - offset < 12) return bad("truncated length");
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, file.data() + offset, 8);
    std::memcpy(&len_crc, file.data() + offset + 8, 4);
    if (MaskCrc32c(Crc32c(file.substr(offset, 8))) != len_crc) return bad("length CRC mismatch");
    if (len > file.size() - offset - 12 || file.size() - offset - 12 - len < 4)
      return bad("truncated data");
    std::string_view data = file.substr(offset + 12, len);
    uint32_t data_crc;
    std::memcpy(&data_crc, file.data() + offset + 12 + len, 4);
    if (MaskCrc32c(Crc32c(data)) != data_crc) return bad("data CRC mismatch");
    records.emplace_back(data);
    offset += 16 + len;
  }
  return records;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string e = EventHeader(wall_time, 0);
  PutBytes(&e, 3, "brain.Event:2");
  return e;
}

std::string EncodeScalarsEvent(double wall_time, int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytes(&v, 1, tag);
    PutKey(&v, 2, kFixed32);
    PutFixed(&v, value);
    PutBytes(&summary, 1, v);
  }
  std::string e = EventHeader(wall_time, step);
  PutBytes(&e, 5, summary);
  return e;
}

absl::StatusOr<DecodedEvent> DecodeEvent(std::string_view bytes) {
  DecodedEvent ev;
  Reader r{bytes};
  while (r.ok && !r.in.empty()) {
    const uint64_t key = r.Varint();
    const uint64_t field = key >> 3, type = key & 7;
    if (field == 1 && type == kFixed64) {
      ev.wall_time = r.Fixed<double>();
    } else if (field == 2 && type == kVarint) {
      ev.step = static_cast<int64_t>(r.Varint());
    } else if (field == 3 && type == kLengthDelimited) {
      ev.file_version = std::string(r.Bytes(r.Varint()));
    } else if (field == 5 && type == kLengthDelimited) {
      Reader s{r.Bytes(r.Varint())};
      while (r.ok && s.ok && !s.in.empty()) {
        const uint64_t skey = s.Varint();
        if (skey != ((1 << 3) | kLengthDelimited)) {
          s.Skip(skey & 7);
          continue;
        }
        Reader v{s.Bytes(s.Varint())};
        std::pair<std::string, float> scalar;
        while (s.ok && v.ok && !v.in.empty()) {
          const uint64_t vkey = v.Varint();
          if (vkey == ((1 << 3) | kLengthDelimited)) {
            scalar.first = std::string(v.Bytes(v.Varint()));
          } else if (vkey == ((2 << 3) | kFixed32)) {
            scalar.second = v.Fixed<float>();
          } else {
            v.Skip(vkey & 7);
          }
        }
        if (!v.ok) s.ok = false;
        ev.scalars.push_back(std::move(scalar));
      }
      if (!s.ok) r.ok = false;
    } else {
      r.Skip(type);
    }
  }
  if (!r.ok) return absl::DataLossError("event: malformed protocol buffer");
  return ev;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir) {
  char host[256] = "localhost";
  (void)gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  const double now = NowSeconds();
  std::unique_ptr<EventFileWriter> w(new EventFileWriter());
  w->path_ = (std::filesystem::path(dir) /
              absl::StrCat("events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".",
                           ::getpid()))
                 .string();
  w->file_ = std::fopen(w->path_.c_str(), "ab");
  if (w->file_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(w->path_, ": cannot create the TensorBoard event file"));
  }
  TESSERA_RETURN_IF_ERROR(w->Append(EncodeFileVersionEvent(now)));
  return w;
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status EventFileWriter::Append(const std::string& event) {
  const std::string rec = FrameTfRecord(event);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": write failed (disk full?)"));
  }
  return absl::OkStatus();
}

absl::Status EventFileWriter::WriteScalars(int64_t step, const Scalars& scalars) {
  return Append(EncodeScalarsEvent(NowSeconds(), step, scalars));
}

}  // namespace tessera
