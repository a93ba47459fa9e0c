// What OneGate and oned do with the text of `PUT /vm`: OneGate's escape_attr and oned's
// template parser (onegate-api.md section 4.1; OpenNebula's template_parser.l and
// template_syntax.y). Used by the simulator to store exactly what oned would store.
#ifndef ONEHPC_TESTS_SIMULATOR_ONED_TEMPLATE_H_
#define ONEHPC_TESTS_SIMULATOR_ONED_TEMPLATE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace onehpc::sim {

/// OneGate's escape_attr: wraps values in double quotes without escaping anything, splits
/// lines at real newlines and at the two characters `\n`.
std::string EscapeAttr(const std::string& data);

/// One attribute of a parsed template: a single value or a vector attribute.
struct TemplateAttribute {
  std::string name;                           ///< upper-cased, as oned stores it
  std::optional<std::string> value;           ///< set for a single attribute
  std::map<std::string, std::string> vector;  ///< sub-attributes when `value` is unset
};

/// Result of ParseOnedTemplate: attributes in text order, or oned's error message.
struct ParsedTemplate {
  bool ok = false;
  std::string error;  ///< e.g. "Parse error: syntax error, unexpected COMMA, ..."
  std::vector<TemplateAttribute> attributes;
};

/// Parses template text as oned does for `one.vm.update`. One deliberate difference from
/// flex: an unquoted value that starts with `"` (an unterminated quote, e.g. what `K=`
/// becomes after escape_attr) is a syntax error, as onegate-api.md section 4.1 records.
ParsedTemplate ParseOnedTemplate(const std::string& text);

}  // namespace onehpc::sim

#endif  // ONEHPC_TESTS_SIMULATOR_ONED_TEMPLATE_H_
