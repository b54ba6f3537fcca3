#include "trainer/internal/config_override.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/escape.h"
#include "trainer/internal/config_reader.h"

namespace tessera::internal {

absl::Status ApplyConfigOverride(const std::string& source, const std::string& text,
                                 YAML::Node* root, std::string* key_out) {
  auto bad = [&](absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": override '", EscapeBytes(text, 200), "': ", problem));
  };
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return bad("expected dotted.key=value");
  std::string key = text.substr(0, eq);
  const std::string value_text = text.substr(eq + 1);
  // Accept both model.tables.0.rows and model.tables[0].rows.
  for (char& ch : key)
    if (ch == '[') ch = '.';
  key.erase(std::remove(key.begin(), key.end(), ']'), key.end());
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (const std::string& part : parts)
    if (part.empty()) return bad("empty key segment");
  YAML::Node value;
  try {
    value = value_text.empty() ? YAML::Node(std::string()) : YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    return bad(absl::StrCat("the value is not valid YAML: ", EscapeBytes(e.msg, 200)));
  }
  YAML::Node cur;
  cur.reset(*root);  // rebind, never assign: Node::operator= copies into the referenced node
  std::string norm;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const bool last = i + 1 == parts.size();
    if (cur.IsSequence()) {
      size_t index;
      if (!absl::SimpleAtoi(part, &index) || index >= cur.size())
        return bad(absl::StrCat("'", EscapeBytes(norm, 200), "' is a list of ", cur.size(),
                                " entries; expected an index below that, got '",
                                EscapeBytes(part), "'"));
      absl::StrAppend(&norm, "[", index, "]");
      if (last) {
        cur[index] = value;
      } else {
        YAML::Node next = cur[index];
        cur.reset(next);
      }
      continue;
    }
    // An absent section (undefined) is created, like a null one.
    if (cur.IsDefined() && !cur.IsMap() && !cur.IsNull())
      return bad(absl::StrCat("'", EscapeBytes(norm, 200), "' is a value, not a section"));
    norm = JoinKey(norm, part);
    if (last) {
      cur[part] = value;
    } else {
      YAML::Node next = cur[part];
      cur.reset(next);
    }
  }
  *key_out = norm;
  return absl::OkStatus();
}

}  // namespace tessera::internal
