#include "context/settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>
#include <utility>

#include "common/base64.h"
#include "common/log.h"

namespace onehpc {
namespace {

constexpr const char* kMask = "********";
constexpr const char* kBoolWords = "YES, NO, TRUE, FALSE, 1, 0, ON, OFF (case-insensitive)";

[[noreturn]] void ProgrammingError(const std::string& message) {
  std::fprintf(stderr, "one-hpc: programming error: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view TrimView(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

char Upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Upper(a[i]) != Upper(b[i])) return false;
  }
  return true;
}

std::string Join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

bool IsSecret(const SettingSpec& spec) {
  return spec.secret || spec.type == SettingType::kPassword;
}

// A value for an error message: quoted, control characters escaped, long values cut.
std::string Show(std::string_view value) {
  std::string out = "'";
  size_t shown = 0;
  for (char ch : value) {
    if (++shown > 80) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(ch);
    }
  }
  return out + "'";
}

// Length of the UTF-8 sequence starting at text[i], or 0 if it is not valid UTF-8.
size_t Utf8SequenceLength(std::string_view text, size_t i) {
  auto c = static_cast<unsigned char>(text[i]);
  size_t len;
  unsigned min;
  unsigned code;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) {
    len = 2, min = 0x80, code = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    len = 3, min = 0x800, code = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    len = 4, min = 0x10000, code = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    auto cc = static_cast<unsigned char>(text[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    code = (code << 6) | (cc & 0x3f);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return len;
}

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t len = Utf8SequenceLength(text, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// Replaces invalid UTF-8 with U+FFFD so nlohmann::json can serialise it.
std::string LossyUtf8(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t len = Utf8SequenceLength(text, i);
    if (len == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string DescribeIntBounds(const SettingSpec& spec) {
  bool has_min = spec.min != INT64_MIN;
  bool has_max = spec.max != INT64_MAX;
  if (has_min && has_max) return fmt::format("between {} and {}", spec.min, spec.max);
  if (has_min) return fmt::format("of at least {}", spec.min);
  if (has_max) return fmt::format("of at most {}", spec.max);
  return "";
}

std::string DescribePattern(const SettingSpec& spec) {
  if (!spec.expected.empty()) return spec.expected;
  return fmt::format("text matching the regular expression {}", spec.pattern);
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> items;
  std::string item;
  for (char c : text) {
    if (c == ',' || IsSpace(c)) {
      if (!item.empty()) items.push_back(std::move(item));
      item.clear();
    } else {
      item.push_back(c);
    }
  }
  if (!item.empty()) items.push_back(std::move(item));
  return items;
}

struct Normalised {
  std::string text;
  std::vector<std::string> secrets;  // derived values to redact as well (decoded text64)
};

Result<Normalised> NormaliseInt(const SettingSpec& spec, std::string_view raw) {
  auto reason = [](std::string text) { return Fail(ErrorKind::kInvalidInput, std::move(text)); };
  std::string_view text = TrimView(raw);
  bool plus = !text.empty() && text.front() == '+';
  if (plus) text.remove_prefix(1);
  std::int64_t value = 0;
  bool digits_only = !text.empty();
  for (size_t i = 0; i < text.size(); ++i) {
    bool digit = text[i] >= '0' && text[i] <= '9';
    if (!digit && !(i == 0 && text[i] == '-' && !plus)) digits_only = false;
  }
  std::string bounds = DescribeIntBounds(spec);
  std::string expected = bounds.empty() ? "a decimal integer" : "a decimal integer " + bounds;
  if (!digits_only) return reason("not a whole number; expected " + expected);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return reason("the number is out of range; expected " + expected);
  }
  if (ec != std::errc() || end != text.data() + text.size()) {
    return reason("not a whole number; expected " + expected);
  }
  if (value < spec.min || value > spec.max) return reason("out of range; expected " + expected);
  return Normalised{std::to_string(value), {}};
}

Result<Normalised> NormaliseList(const SettingSpec& spec, std::string_view raw,
                                 const std::optional<std::regex>& pattern, bool secret) {
  std::vector<std::string> items = SplitList(raw);
  if (pattern) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (!std::regex_match(items[i], *pattern)) {
        return Fail(ErrorKind::kInvalidInput,
                    fmt::format("item {}{} is not valid; expected a list separated by commas or "
                                "spaces, each item {}",
                                i + 1, secret ? "" : " " + Show(items[i]), DescribePattern(spec)));
      }
    }
  }
  return Normalised{Join(items, ","), {}};
}

// Validates one non-empty raw value. The error message is the reason only: it never
// contains the value itself, so it is safe for secrets.
Result<Normalised> Normalise(const SettingSpec& spec, std::string_view raw,
                             const std::optional<std::regex>& pattern) {
  const bool secret = IsSecret(spec);
  auto reason = [](std::string text) { return Fail(ErrorKind::kInvalidInput, std::move(text)); };
  switch (spec.type) {
    case SettingType::kBool: {
      auto value = ParseBool(TrimView(raw));
      if (!value) return reason(fmt::format("not a boolean; expected one of {}", kBoolWords));
      return Normalised{*value ? "YES" : "NO", {}};
    }
    case SettingType::kInt:
      return NormaliseInt(spec, raw);
    case SettingType::kString:
    case SettingType::kPassword: {
      if (raw.find_first_of("\r\n") != std::string_view::npos) {
        return reason("must be a single line of text");
      }
      if (pattern && !std::regex_match(raw.begin(), raw.end(), *pattern)) {
        return reason("expected " + DescribePattern(spec));
      }
      return Normalised{std::string(raw), {}};
    }
    case SettingType::kText64: {
      auto decoded = Base64DecodeLenient(raw);
      if (!decoded) {
        return reason(
            fmt::format("not valid base64 ({}); expected the base64 encoding of "
                        "the text (e.g. the output of base64 -w0)",
                        decoded.error().message));
      }
      std::vector<std::string> secrets;
      if (secret) secrets.push_back(*decoded);
      return Normalised{std::move(*decoded), std::move(secrets)};
    }
    case SettingType::kEnum: {
      std::string_view text = TrimView(raw);
      for (const auto& choice : spec.choices) {
        if (EqualsIgnoreCase(text, choice)) return Normalised{choice, {}};
      }
      return reason(fmt::format("expected one of: {}", Join(spec.choices, ", ")));
    }
    case SettingType::kList:
      return NormaliseList(spec, raw, pattern, secret);
  }
  return reason("unknown setting type");
}

// "A" or "A (default: B)" for the hint at the end of an error line.
std::string DefaultHint(const SettingSpec& spec) {
  if (spec.default_value.empty()) return "";
  if (IsSecret(spec)) return "; leave it empty for the default";
  return fmt::format("; leave it empty for the default ({})", spec.default_value);
}

std::string MarkdownCell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::optional<bool> ParseBool(std::string_view text) {
  for (const char* word : {"YES", "TRUE", "1", "ON"}) {
    if (EqualsIgnoreCase(text, word)) return true;
  }
  for (const char* word : {"NO", "FALSE", "0", "OFF"}) {
    if (EqualsIgnoreCase(text, word)) return false;
  }
  return std::nullopt;
}

std::optional<std::string> DecodeBase64(std::string_view text) {
  auto decoded = Base64DecodeLenient(text);
  if (!decoded) return std::nullopt;
  return std::move(*decoded);
}

Result<Settings> Settings::Resolve(const std::vector<SettingSpec>& specs, const ContextVars& vars) {
  Settings settings;
  settings.specs_ = specs;
  std::vector<std::string> problems;
  std::set<std::string> seen;
  for (const auto& spec : specs) {
    if (!seen.insert(spec.name).second) {
      return Fail(ErrorKind::kInternal, fmt::format("setting {} is declared twice", spec.name));
    }
    std::optional<std::regex> pattern;
    if (!spec.pattern.empty() &&
        (spec.type == SettingType::kString || spec.type == SettingType::kPassword ||
         spec.type == SettingType::kList)) {
      try {
        pattern.emplace(spec.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        return Fail(ErrorKind::kInternal,
                    fmt::format("setting {} has an invalid pattern: {}", spec.name, e.what()));
      }
    }
    if (spec.type == SettingType::kEnum && spec.choices.empty()) {
      return Fail(ErrorKind::kInternal, fmt::format("enum setting {} has no choices", spec.name));
    }

    const bool secret = IsSecret(spec);
    std::string_view raw;
    if (auto it = vars.find(spec.name); it != vars.end()) raw = it->second;
    if (secret && !TrimView(raw).empty()) {
      log::AddSecret(std::string(raw));
      std::string trimmed(TrimView(raw));
      if (trimmed != raw) log::AddSecret(trimmed);
    }

    Value value;
    if (!TrimView(raw).empty()) {
      auto normalised = Normalise(spec, raw, pattern);
      if (!normalised) {
        problems.push_back(fmt::format("{}={}: {}{}", spec.name,
                                       secret ? "<secret, not shown>" : Show(raw),
                                       normalised.error().message, DefaultHint(spec)));
        continue;
      }
      for (auto& derived : normalised->secrets) log::AddSecret(std::move(derived));
      if (secret) log::AddSecret(normalised->text);
      value.text = std::move(normalised->text);
      value.from_context = true;
      value.present = true;
    } else if (!spec.default_value.empty()) {
      auto normalised = Normalise(spec, spec.default_value, pattern);
      if (!normalised) {
        return Fail(ErrorKind::kInternal,
                    fmt::format("the default value of setting {} is invalid: {}", spec.name,
                                normalised.error().message));
      }
      value.text = std::move(normalised->text);
      value.present = true;
    } else if (spec.required) {
      problems.push_back(fmt::format(
          "{} is required but {}: {}", spec.name, vars.count(spec.name) ? "empty" : "not set",
          spec.description.empty() ? "give it a value" : spec.description));
      continue;
    }
    settings.values_.emplace(spec.name, std::move(value));
  }
  if (!problems.empty()) return Fail(ErrorKind::kInvalidInput, Join(problems, "\n"));
  return settings;
}

const Settings::Value& Settings::Find(const std::string& name, SettingType expected_type) const {
  return Find(name, {expected_type}, ToString(expected_type));
}

const Settings::Value& Settings::Find(const std::string& name,
                                      std::initializer_list<SettingType> types,
                                      const char* accessor) const {
  for (const auto& spec : specs_) {
    if (spec.name != name) continue;
    bool type_ok = false;
    for (SettingType type : types) type_ok = type_ok || type == spec.type;
    if (!type_ok) {
      ProgrammingError(fmt::format("setting {} is of type {} but was read with {}", name,
                                   ToString(spec.type), accessor));
    }
    auto it = values_.find(name);
    if (it == values_.end()) {
      ProgrammingError(fmt::format("setting {} has no resolved value", name));
    }
    return it->second;
  }
  ProgrammingError(fmt::format("setting {} was read with {} but is not declared", name, accessor));
}

bool Settings::GetBool(const std::string& name) const {
  const Value& value = Find(name, {SettingType::kBool}, "GetBool");
  return value.text == "YES";
}

std::int64_t Settings::GetInt(const std::string& name) const {
  const Value& value = Find(name, {SettingType::kInt}, "GetInt");
  if (!value.present) return 0;
  std::int64_t out = 0;
  std::from_chars(value.text.data(), value.text.data() + value.text.size(), out);
  return out;
}

const std::string& Settings::GetString(const std::string& name) const {
  return Find(name,
              {SettingType::kString, SettingType::kPassword, SettingType::kText64,
               SettingType::kEnum},
              "GetString")
      .text;
}

std::vector<std::string> Settings::GetList(const std::string& name) const {
  const Value& value = Find(name, {SettingType::kList}, "GetList");
  return SplitList(value.text);
}

bool Settings::IsSet(const std::string& name) const {
  for (const auto& spec : specs_) {
    if (spec.name == name) {
      auto it = values_.find(name);
      return it != values_.end() && it->second.from_context;
    }
  }
  ProgrammingError(fmt::format("setting {} was read with IsSet but is not declared", name));
}

nlohmann::json Settings::ToJson(bool show_secrets) const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& spec : specs_) {
    auto it = values_.find(spec.name);
    if (it == values_.end()) continue;
    const Value& value = it->second;
    nlohmann::json shown;
    if (!value.present) {
      shown = nullptr;
    } else if (IsSecret(spec) && !show_secrets && !value.text.empty()) {
      shown = kMask;
    } else {
      switch (spec.type) {
        case SettingType::kBool:
          shown = value.text == "YES";
          break;
        case SettingType::kInt:
          shown = GetInt(spec.name);
          break;
        case SettingType::kList: {
          shown = nlohmann::json::array();
          for (const auto& item : SplitList(value.text)) shown.push_back(LossyUtf8(item));
          break;
        }
        case SettingType::kText64:
          shown = IsValidUtf8(value.text)
                      ? value.text
                      : fmt::format("<binary data, {} bytes>", value.text.size());
          break;
        default:
          shown = LossyUtf8(value.text);
          break;
      }
    }
    out[spec.name] = {{"value", shown},
                      {"source", value.from_context ? "context" : "default"},
                      {"type", ToString(spec.type)}};
  }
  return out;
}

namespace {

// Edit distance with adjacent transpositions (optimal string alignment): a missing, extra,
// wrong or swapped character counts one.
size_t TypoDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::vector<std::string> UnknownSettingWarnings(const std::vector<SettingSpec>& known,
                                                const ContextVars& vars) {
  constexpr std::string_view kPrefix = "ONEAPP_";
  std::set<std::string> names;
  for (const auto& spec : known) names.insert(spec.name);
  std::vector<std::string> warnings;
  for (const auto& [name, value] : vars) {  // a std::map: sorted by name
    (void)value;
    if (name.compare(0, kPrefix.size(), kPrefix) != 0 || names.count(name) > 0) continue;
    std::string closest;
    size_t best = SIZE_MAX;
    for (const auto& candidate : names) {
      if (candidate.compare(0, kPrefix.size(), kPrefix) != 0) continue;
      const size_t d = TypoDistance(name, candidate);
      if (d < best) best = d, closest = candidate;
    }
    // Near enough to be the one meant: about one slip in five characters of the part after
    // ONEAPP_, at least 2 (ONEAPP_SLURM_MAX_NODE, ONEAPP_SLRUM_PARTITION).
    const size_t allowed = std::max<size_t>(2, (name.size() - kPrefix.size()) / 5);
    warnings.push_back(
        best <= allowed
            ? fmt::format("{} is not a setting of one-hpc and is ignored: did you mean {}?", name,
                          closest)
            : fmt::format("{} is not a setting of one-hpc and is ignored (no known setting is "
                          "close; `one-hpc settings --all` lists them)",
                          name));
  }
  return warnings;
}

std::string SettingsMarkdownTable(const std::vector<SettingSpec>& specs) {
  std::string out =
      "| Variable | Roles | Type | Default | Description |\n"
      "|---|---|---|---|---|\n";
  for (const auto& spec : specs) {
    std::string type = ToString(spec.type);
    if (spec.type == SettingType::kInt) {
      std::string bounds = DescribeIntBounds(spec);
      if (!bounds.empty()) type += " " + bounds;
    } else if (spec.type == SettingType::kEnum) {
      std::vector<std::string> quoted;
      for (const auto& choice : spec.choices) quoted.push_back("`" + choice + "`");
      type += ": " + Join(quoted, ", ");
    }
    std::string default_cell;
    if (!spec.default_value.empty()) {
      default_cell = "`" + spec.default_value + "`";
    } else if (spec.required) {
      default_cell = "(required)";
    }
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", MarkdownCell(spec.name),
                       MarkdownCell(Join(spec.roles, ", ")), MarkdownCell(type),
                       MarkdownCell(default_cell), MarkdownCell(spec.description));
  }
  return out;
}

const char* ToString(SettingType type) {
  switch (type) {
    case SettingType::kBool:
      return "bool";
    case SettingType::kInt:
      return "int";
    case SettingType::kString:
      return "string";
    case SettingType::kPassword:
      return "password";
    case SettingType::kText64:
      return "text64";
    case SettingType::kEnum:
      return "enum";
    case SettingType::kList:
      return "list";
  }
  return "unknown";
}

}  // namespace onehpc
