// --help for the binaries, and a hint for a flag they do not have.
//
// Abseil's --help lists only the flags of a file named like the program (none of ours), so
// each binary calls HandleHelp before parsing: for -h, -help, --help or --helpshort it prints
// the binary's usage (its subcommands), then every flag defined in tools/ with its meaning and
// default (ABSL_FLAGs, so a flag added there is listed without touching this file), then the
// flags the binary handles itself (`extra`: --set ...), and exits 0. --helpfull stays Abseil's
// (every flag, Abseil's own included). CheckKnownFlags runs before Abseil's parser too, so that
// an unknown flag gets a hint instead of Abseil's bare message.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "trainer/internal/config_reader.h"

namespace tessera {

// A flag a binary handles itself (not an ABSL_FLAG), for the help text.
struct ExtraFlag {
  const char* spelling;  // "--set key=value"
  const char* help;
};

namespace help_internal {

// Flags of the binaries: defined in tools/, not the test-only ones.
inline bool OwnFlag(const absl::CommandLineFlag& f) {
  const std::string file(f.Filename());
  const bool in_tools = file.rfind("tools/", 0) == 0 || file.find("/tools/") != std::string::npos;
  return in_tools && f.Name().rfind("test_", 0) != 0;
}

inline std::string Spelling(const absl::CommandLineFlag& f) {
  std::string s = "--" + std::string(f.Name());
  if (f.IsOfType<bool>()) return s;
  if (f.IsOfType<std::string>()) return s + "=TEXT";
  if (f.IsOfType<double>() || f.IsOfType<float>()) return s + "=X";
  return s + "=N";
}

inline std::string Default(const absl::CommandLineFlag& f) {
  const std::string d = f.DefaultValue();
  if (f.IsOfType<std::string>()) return d.empty() ? "none" : "'" + d + "'";
  return d;
}

// Prints `text` wrapped at 100 columns, each line indented by `indent` spaces.
inline void PrintWrapped(std::FILE* out, const std::string& text, size_t first_col,
                         size_t indent) {
  size_t col = first_col;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    const std::string word = text.substr(i, j - i);
    if (col > indent && col + 1 + word.size() > 100) {
      std::fprintf(out, "\n%*s", static_cast<int>(indent), "");
      col = indent;
    } else if (col > indent) {
      std::fputc(' ', out);
      ++col;
    }
    std::fputs(word.c_str(), out);
    col += word.size();
    i = j + 1;
  }
  std::fputc('\n', out);
}

inline void PrintFlag(std::FILE* out, const std::string& spelling, const std::string& help) {
  std::fprintf(out, "  %-28s", spelling.c_str());
  size_t col = 2 + std::max<size_t>(28, spelling.size());
  if (spelling.size() >= 28) {
    std::fprintf(out, "\n%30s", "");
    col = 30;
  }
  PrintWrapped(out, help, col, 30);
}

}  // namespace help_internal

// The binary's own flags (sorted by name) and `extra`, one per entry: spelling, meaning,
// default. What --help prints after the usage.
inline void PrintOwnFlags(std::FILE* out, const std::vector<ExtraFlag>& extra) {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (help_internal::OwnFlag(*flag)) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](auto* a, auto* b) { return a->Name() < b->Name(); });
  std::fprintf(out, "\nFlags (--name=value or --name value; a dash may replace an underscore):\n");
  for (const absl::CommandLineFlag* f : flags) {
    help_internal::PrintFlag(out, help_internal::Spelling(*f),
                             f->Help() + " [default: " + help_internal::Default(*f) + "]");
  }
  for (const ExtraFlag& e : extra) help_internal::PrintFlag(out, e.spelling, e.help);
  help_internal::PrintFlag(out, "-h, --help", "this text; --helpfull adds Abseil's own flags");
}

// When argv asks for help (-h, -help, --help, --helpshort; anywhere before a "--"), prints
// `usage` and the flags to stdout and returns true (the caller exits 0).
inline bool HandleHelp(int argc, char** argv, const char* usage,
                       const std::vector<ExtraFlag>& extra = {}) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "-h" || a == "-help" || a == "--help" || a == "--helpshort" ||
        a.rfind("--help=", 0) == 0) {
      std::fputs(usage, stdout);
      if (usage[0] != '\0' && usage[std::strlen(usage) - 1] != '\n') std::fputc('\n', stdout);
      PrintOwnFlags(stdout, extra);
      return true;
    }
  }
  return false;
}

// Abseil flag names cannot hold dashes: rewrites `--rows-preset` to `--rows_preset` (the name
// part only, never the value), so either spelling works.
inline void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (std::strcmp(a, "--") == 0) break;
    if (std::strncmp(a, "--", 2) != 0) continue;
    for (char* p = a + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

// The name of a flag argument ("--epochs=3" -> "epochs"), dashes in the name as underscores;
// "" when `a` is not a flag.
inline std::string FlagName(std::string_view a) {
  if (a.size() < 2 || a[0] != '-') return "";
  a.remove_prefix(a[1] == '-' ? 2 : 1);
  std::string name(a.substr(0, a.find('=')));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// Checks every flag in argv (up to "--") against the defined ones. For one not defined, prints
// "<program>: unknown flag --X" and `hint` (which may name the --set way) to stderr, and returns
// false (the caller exits 2). Flags Abseil handles itself (--helpfull, --version, --flagfile,
// ...) pass.
// `hint` maps the unknown flag's name to the advice printed after it.
inline bool CheckKnownFlags(int argc, char** argv, const char* program,
                            std::string (*hint)(const std::string& name)) {
  static const char* const kAbseil[] = {"helpfull", "helpshort", "helppackage", "helpmatch",
                                        "helpon",   "version",   "only_check_args",
                                        "flagfile", "fromenv",   "tryfromenv", "undefok"};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    const std::string name = FlagName(a);
    if (name.empty()) continue;
    bool known = std::find(std::begin(kAbseil), std::end(kAbseil), name) != std::end(kAbseil);
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr && name.rfind("no", 0) == 0) {
      const absl::CommandLineFlag* b = absl::FindCommandLineFlag(name.substr(2));
      if (b != nullptr && b->IsOfType<bool>()) f = b;
    }
    if (f != nullptr) {
      known = true;
      // --flag value: skip the value (it may start with '-').
      if (!f->IsOfType<bool>() && a.find('=') == std::string_view::npos) ++i;
    }
    if (!known) {
      std::fprintf(stderr, "%s: unknown flag %.*s. %s (%s --help lists the flags)\n", program,
                   static_cast<int>(a.find('=') == std::string_view::npos ? a.size() : a.find('=')),
                   a.data(), hint(name).c_str(), program);
      return false;
    }
  }
  return true;
}

// The hint of the binaries that read a config: config keys whose last part is `name`
// ("epochs" -> "--set train.epochs=..."), else how --set works.
inline std::string SetHint(const std::string& name) {
  std::vector<std::string> keys;
  for (const internal::SchemaSection& s : internal::ConfigSchema()) {
    for (const std::string& k : s.keys) {
      if (k == name) keys.push_back(s.path.empty() ? k : s.path + "." + k);
    }
  }
  std::string out = "Config keys are set with --set key=value (docs/CONFIG.md)";
  for (size_t i = 0; i < keys.size() && i < 3; ++i) {
    out += (i == 0 ? ", e.g. --set " : " or --set ") + keys[i] + "=...";
  }
  return out;
}

}  // namespace tessera
