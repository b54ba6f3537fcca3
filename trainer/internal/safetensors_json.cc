#include "trainer/internal/safetensors_json.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/escape.h"
#include "core/status.h"

namespace tessera::internal {
namespace {

// Recursive-descent parser over the header bytes. Errors carry the byte offset.
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  absl::Status ParseDocument(Json* out) {
    TESSERA_RETURN_IF_ERROR(ParseValue(out, 0));
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters after the JSON object");
    return absl::OkStatus();
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::DataLossError(absl::StrCat("header JSON at byte ", pos_, ": ", absl::string_view(what.data(), what.size())));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' ||
                                s_[pos_] == '\t'))
      ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::Status ParseValue(Json* out, int depth) {
    if (depth > 8) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end");
    char c = s_[pos_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out->kind = Json::kString;
      return ParseString(&out->str);
    }
    if (c >= '0' && c <= '9') return ParseInt(out);
    return Error(
        absl::StrCat("unexpected character '", EscapeBytes(std::string_view(&c, 1)), "'"));
  }

  absl::Status ParseObject(Json* out, int depth) {
    out->kind = Json::kObject;
    ++pos_;  // '{'
    if (Consume('}')) return absl::OkStatus();
    do {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a string key");
      std::string key;
      TESSERA_RETURN_IF_ERROR(ParseString(&key));
      for (const auto& m : out->members)
        if (m.key == key) return Error(absl::StrCat("duplicate key \"", EscapeBytes(key), "\""));
      if (!Consume(':')) return Error("expected ':'");
      Json value;
      TESSERA_RETURN_IF_ERROR(ParseValue(&value, depth + 1));
      out->members.push_back(Json::Member{std::move(key), std::move(value)});
    } while (Consume(','));
    if (!Consume('}')) return Error("expected ',' or '}'");
    return absl::OkStatus();
  }

  absl::Status ParseArray(Json* out, int depth) {
    out->kind = Json::kArray;
    ++pos_;  // '['
    if (Consume(']')) return absl::OkStatus();
    do {
      Json value;
      TESSERA_RETURN_IF_ERROR(ParseValue(&value, depth + 1));
      out->items.push_back(std::move(value));
    } while (Consume(','));
    if (!Consume(']')) return Error("expected ',' or ']'");
    return absl::OkStatus();
  }

  absl::Status ParseInt(Json* out) {
    out->kind = Json::kInt;
    out->num = 0;
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (out->num > (std::numeric_limits<uint64_t>::max() - d) / 10)
        return Error("integer overflows 64 bits");
      out->num = out->num * 10 + d;
      ++pos_;
    }
    if (pos_ - start > 1 && s_[start] == '0') return Error("integer with a leading zero");
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      return Error("expected an integer, got a fraction or exponent");
    return absl::OkStatus();
  }

  absl::Status ParseHex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    *out = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      int v = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (v < 0) return Error("bad \\u escape");
      *out = *out * 16 + static_cast<uint32_t>(v);
    }
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return absl::OkStatus();
      if (c < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          TESSERA_RETURN_IF_ERROR(ParseHex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00) {  // high surrogate: a low one must follow
            uint32_t lo = 0;
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
              return Error("unpaired surrogate");
            pos_ += 2;
            TESSERA_RETURN_IF_ERROR(ParseHex4(&lo));
            if (lo < 0xDC00 || lo >= 0xE000) return Error("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return Error("unpaired surrogate");
          }
          AppendUtf8(cp, out);
          break;
        }
        default: return Error("bad escape");
      }
    }
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status ParseJson(std::string_view text, Json* out) {
  return JsonParser(text).ParseDocument(out);
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) absl::StrAppendFormat(out, "\\u%04x", c);
        else out->push_back(static_cast<char>(c));  // UTF-8 passes through unchanged
    }
  }
  out->push_back('"');
}

}  // namespace tessera::internal
