// Typed ONEAPP_* settings: each role declares one table; values are validated against it.
#ifndef ONEHPC_CONTEXT_SETTINGS_H_
#define ONEHPC_CONTEXT_SETTINGS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "context/context_file.h"

namespace onehpc {

enum class SettingType {
  kBool,      ///< YES/NO/TRUE/FALSE/1/0/ON/OFF, case-insensitive
  kInt,       ///< decimal integer within [min, max]
  kString,    ///< one line of text; `pattern` (ECMAScript regex) may restrict it
  kPassword,  ///< like kString but secret: masked in output, redacted from logs
  kText64,    ///< base64 of arbitrary text; the value is the decoded text
  kEnum,      ///< one of `choices`
  kList,      ///< items separated by commas and/or whitespace; each item matches `pattern`
};

/// One ONEAPP_* (or other context) variable a role reads.
struct SettingSpec {
  std::string name;
  SettingType type = SettingType::kString;
  std::string default_value;       ///< used when the variable is absent or empty; "" = none
  std::string description;         ///< one sentence for the operator guide and the templates
  std::vector<std::string> roles;  ///< roles that read it ("controller", "worker", ...)
  std::int64_t min = INT64_MIN;    ///< kInt bounds
  std::int64_t max = INT64_MAX;
  std::vector<std::string> choices;  ///< kEnum values
  std::string pattern;               ///< kString / kList item regex; "" = any single line
  std::string expected;   ///< what a valid value looks like, for error messages (optional)
  bool secret = false;    ///< kPassword and kText64 secrets: never printed or logged
  bool required = false;  ///< absent or empty (with no default) is an error
};

/// Parses a boolean the documented way; nullopt for anything else.
std::optional<bool> ParseBool(std::string_view text);

/// Decodes standard base64 (RFC 4648 alphabet `A-Za-z0-9+/`). ASCII whitespace anywhere is
/// ignored (wrapped `base64` output is fine); `=` padding is optional but, if present, must
/// be correct; the unused bits of the last character must be zero. nullopt otherwise.
std::optional<std::string> DecodeBase64(std::string_view text);

/// The effective, validated values of a set of specs.
///
/// Rules: a value that is absent, empty or only whitespace takes the default ("empty means
/// default", as OpenNebula sends blank optional inputs as ''). kBool, kInt and kEnum values
/// are trimmed; kEnum matches a choice case-insensitively and keeps the choice's spelling;
/// kString / kPassword values are kept as given but must be one line; kList items are
/// split on commas and whitespace, empty items dropped; a `pattern` must match the whole
/// value (kString, kPassword) or each whole item (kList); kText64 is decoded with
/// DecodeBase64 (padding optional, strict otherwise). A setting with neither a value nor a default
/// reads as false / 0 / "" /
/// {} (IsSet() tells). Asking for an undeclared name or with the wrong type is a
/// programming error: the process prints the reason and aborts.
class Settings {
 public:
  /// Validates every spec against `vars`; on failure the error (kInvalidInput) lists every
  /// bad variable, one per line, each naming the variable, its value (unless secret) and
  /// what was expected. Secret values are registered with log::AddSecret.
  static Result<Settings> Resolve(const std::vector<SettingSpec>& specs, const ContextVars& vars);

  bool GetBool(const std::string& name) const;
  std::int64_t GetInt(const std::string& name) const;
  /// kString, kPassword, kText64 (decoded), kEnum.
  const std::string& GetString(const std::string& name) const;
  std::vector<std::string> GetList(const std::string& name) const;
  /// True if the operator gave a non-empty value (not the default).
  bool IsSet(const std::string& name) const;

  /// {"NAME": {"value": ..., "source": "context"|"default", "type": ...}}; secrets masked
  /// as "********" unless show_secrets.
  nlohmann::json ToJson(bool show_secrets) const;

  const std::vector<SettingSpec>& specs() const { return specs_; }

 private:
  struct Value {
    std::string text;  // normalised text (decoded for kText64)
    bool from_context = false;
    bool present = false;  // from the context or a default
  };
  const Value& Find(const std::string& name, SettingType expected_type) const;
  const Value& Find(const std::string& name, std::initializer_list<SettingType> types,
                    const char* accessor) const;
  std::vector<SettingSpec> specs_;
  std::map<std::string, Value> values_;
};

/// One warning for each ONEAPP_* variable of `vars` that no spec of `known` names (a typo such
/// as ONEAPP_SLURM_MAX_NODE is otherwise ignored without a word), naming the closest known
/// setting when one is near enough to be the one meant. Values are never shown (the typo may be
/// of a password's name). Sorted by variable name.
std::vector<std::string> UnknownSettingWarnings(const std::vector<SettingSpec>& known,
                                                const ContextVars& vars);

/// Renders a Markdown table (Variable | Roles | Type | Default | Description) of specs.
std::string SettingsMarkdownTable(const std::vector<SettingSpec>& specs);

const char* ToString(SettingType type);

}  // namespace onehpc

#endif  // ONEHPC_CONTEXT_SETTINGS_H_
