#include "roles/slurm/nodes.h"

#include <cctype>
#include <charconv>
#include <ctime>
#include <nlohmann/json.hpp>

namespace onehpc::slurm {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!Trim(line).empty()) lines.push_back(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

bool IsKeyChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Key=Value words; a value runs until the next " Key=" (a word that starts with a letter and
// holds only [A-Za-z0-9_] up to its '='), so values with spaces (OS=, Reason=) stay whole.
std::map<std::string, std::string> SplitFields(std::string_view line) {
  std::vector<std::pair<size_t, size_t>> keys;  // (key start, '=' position)
  for (size_t i = 0; i < line.size(); ++i) {
    if (i > 0 && line[i - 1] != ' ') continue;
    if (!std::isalpha(static_cast<unsigned char>(line[i]))) continue;
    size_t j = i;
    while (j < line.size() && IsKeyChar(line[j])) ++j;
    if (j < line.size() && line[j] == '=') keys.emplace_back(i, j);
  }
  std::map<std::string, std::string> fields;
  for (size_t k = 0; k < keys.size(); ++k) {
    size_t value_start = keys[k].second + 1;
    size_t value_end = k + 1 < keys.size() ? keys[k + 1].first : line.size();
    std::string key(line.substr(keys[k].first, keys[k].second - keys[k].first));
    std::string value(Trim(line.substr(value_start, value_end - value_start)));
    fields.emplace(std::move(key), std::move(value));  // first occurrence wins
  }
  return fields;
}

std::string StripReasonSuffix(const std::string& reason) {
  // Slurm appends " [user@YYYY-MM-DDTHH:MM:SS]" to a reason it prints.
  if (reason.size() >= 2 && reason.back() == ']') {
    size_t open = reason.rfind(" [");
    if (open != std::string::npos && reason.find('@', open) != std::string::npos) {
      return reason.substr(0, open);
    }
  }
  return reason;
}

Status ExpandInto(const std::string& pattern, std::vector<std::string>& out, size_t limit) {
  size_t open = pattern.find('[');
  if (open == std::string::npos) {
    if (pattern.find(']') != std::string::npos) {
      return Fail(ErrorKind::kInvalidInput, "unbalanced ']' in host list item '" + pattern + "'");
    }
    if (out.size() >= limit) {
      return Fail(ErrorKind::kInvalidInput,
                  "host list expands to more than " + std::to_string(limit) + " names");
    }
    out.push_back(pattern);
    return Ok();
  }
  size_t close = pattern.find(']', open);
  if (close == std::string::npos) {
    return Fail(ErrorKind::kInvalidInput, "unbalanced '[' in host list item '" + pattern + "'");
  }
  std::string prefix = pattern.substr(0, open);
  std::string ranges = pattern.substr(open + 1, close - open - 1);
  std::string rest = pattern.substr(close + 1);
  if (ranges.empty()) return Fail(ErrorKind::kInvalidInput, "empty range in '" + pattern + "'");
  size_t pos = 0;
  while (pos <= ranges.size()) {
    size_t comma = ranges.find(',', pos);
    std::string part =
        ranges.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = part.find('-');
    std::string lo_text = part.substr(0, dash);
    std::string hi_text = dash == std::string::npos ? lo_text : part.substr(dash + 1);
    auto digits = [](const std::string& s) {
      if (s.empty() || s.size() > 9) return false;
      for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      }
      return true;
    };
    if (!digits(lo_text) || !digits(hi_text)) {
      return Fail(ErrorKind::kInvalidInput, "bad range '" + part + "' in '" + pattern + "'");
    }
    long lo = std::stol(lo_text);
    long hi = std::stol(hi_text);
    if (hi < lo) {
      return Fail(ErrorKind::kInvalidInput, "bad range '" + part + "' in '" + pattern + "'");
    }
    if (static_cast<size_t>(hi - lo) >= limit) {
      return Fail(ErrorKind::kInvalidInput,
                  "host list expands to more than " + std::to_string(limit) + " names");
    }
    size_t width = lo_text.size();  // Slurm keeps the zero padding of the lower bound
    for (long n = lo; n <= hi; ++n) {
      std::string number = std::to_string(n);
      if (number.size() < width) number.insert(0, width - number.size(), '0');
      if (auto s = ExpandInto(prefix + number + rest, out, limit); !s) return s;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return Ok();
}

}  // namespace

std::string SlurmNode::BaseState() const {
  size_t plus = state.find('+');
  std::string base = state.substr(0, plus);
  // sinfo-style suffixes ("DOWN*", "IDLE~") never appear in scontrol output, but be tolerant.
  while (!base.empty() && !std::isalpha(static_cast<unsigned char>(base.back()))) base.pop_back();
  return base;
}

bool SlurmNode::HasFlag(std::string_view flag) const {
  std::string_view s = state;
  size_t plus = s.find('+');
  if (plus == std::string_view::npos) return false;
  s.remove_prefix(plus + 1);
  while (!s.empty()) {
    size_t next = s.find('+');
    if (s.substr(0, next) == flag) return true;
    if (next == std::string_view::npos) break;
    s.remove_prefix(next + 1);
  }
  return false;
}

Result<std::vector<SlurmNode>> ParseShowNodes(std::string_view output) {
  std::vector<SlurmNode> nodes;
  for (std::string_view line : Lines(output)) {
    std::string_view trimmed = Trim(line);
    if (trimmed == "No nodes in the system") continue;
    auto fields = SplitFields(trimmed);
    auto name = fields.find("NodeName");
    if (name == fields.end() || name->second.empty()) {
      return Fail(ErrorKind::kInvalidInput,
                  "unexpected line in scontrol show nodes output (no NodeName=): '" +
                      std::string(trimmed.substr(0, 120)) + "'");
    }
    SlurmNode node;
    node.name = name->second;
    auto get = [&](const char* key) {
      auto it = fields.find(key);
      return it == fields.end() ? std::string() : it->second;
    };
    node.addr = get("NodeAddr");
    node.hostname = get("NodeHostName");
    node.state = get("State");
    node.reason = StripReasonSuffix(get("Reason"));
    if (std::string full = get("Reason"); full.size() > node.reason.size()) {
      size_t at = full.find('@', node.reason.size());
      if (at != std::string::npos && full.back() == ']') {
        node.reason_since = ParseSlurmTime(full.substr(at + 1, full.size() - at - 2));
      }
    }
    node.last_busy = ParseSlurmTime(get("LastBusyTime"));
    node.features = get("AvailableFeatures");
    node.gres = get("Gres");
    node.fields = std::move(fields);
    nodes.push_back(std::move(node));
  }
  return nodes;
}

namespace {

// A string, or an array of strings joined by `sep` (data_parser's lists: the state flags,
// the features). Anything else is "".
std::string JoinedStrings(const nlohmann::json& v, char sep) {
  if (v.is_string()) return v.get<std::string>();
  std::string out;
  if (!v.is_array()) return out;
  for (const auto& item : v) {
    if (!item.is_string()) continue;
    if (!out.empty()) out += sep;
    out += item.get<std::string>();
  }
  return out;
}

// data_parser's time: {"set": true, "infinite": false, "number": SECONDS}, or a bare number
// (older parsers). Unset, infinite or 0 (Slurm's "None") is nullopt.
std::optional<long long> JsonTime(const nlohmann::json& v) {
  const nlohmann::json* n = &v;
  if (v.is_object()) {
    if (!v.value("set", false) || v.value("infinite", false) || !v.contains("number")) {
      return std::nullopt;
    }
    n = &v["number"];
  }
  if (!n->is_number_integer()) return std::nullopt;
  long long t = n->get<long long>();
  if (t <= 0) return std::nullopt;
  return t;
}

std::string JsonString(const nlohmann::json& node, const char* key) {
  auto it = node.find(key);
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Result<std::vector<SlurmNode>> ParseShowNodesJson(std::string_view output) {
  auto doc = nlohmann::json::parse(output, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Fail(ErrorKind::kInvalidInput, "scontrol --json show nodes printed no JSON object: '" +
                                              std::string(Trim(output.substr(0, 120))) + "'");
  }
  if (auto errors = doc.find("errors");
      errors != doc.end() && errors->is_array() && !errors->empty()) {
    const auto& first = (*errors)[0];
    std::string what = first.is_object() ? JsonString(first, "description") : std::string();
    if (what.empty() && first.is_object()) what = JsonString(first, "error");
    return Fail(ErrorKind::kProcess, "scontrol --json show nodes reported an error: " +
                                         (what.empty() ? first.dump().substr(0, 200) : what));
  }
  auto list = doc.find("nodes");
  if (list == doc.end() || !list->is_array()) {
    return Fail(ErrorKind::kInvalidInput, "scontrol --json show nodes: no \"nodes\" array");
  }
  std::vector<SlurmNode> nodes;
  for (const auto& item : *list) {
    if (!item.is_object() || JsonString(item, "name").empty()) {
      return Fail(ErrorKind::kInvalidInput, "scontrol --json show nodes: a node without a name: " +
                                                item.dump().substr(0, 120));
    }
    SlurmNode node;
    node.name = JsonString(item, "name");
    node.addr = JsonString(item, "address");
    node.hostname = JsonString(item, "hostname");
    node.state = item.contains("state") ? JoinedStrings(item["state"], '+') : std::string();
    node.reason = JsonString(item, "reason");
    if (!node.reason.empty() && item.contains("reason_changed_at")) {
      node.reason_since = JsonTime(item["reason_changed_at"]);
    }
    if (item.contains("last_busy")) node.last_busy = JsonTime(item["last_busy"]);
    node.features = item.contains("features") ? JoinedStrings(item["features"], ',') : "";
    node.gres = JsonString(item, "gres");
    nodes.push_back(std::move(node));
  }
  return nodes;
}

std::optional<long long> ParseSlurmTime(std::string_view text) {
  // 2026-12-03T14:05:09
  if (text.size() != 19 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' ||
      text[16] != ':') {
    return std::nullopt;
  }
  auto num = [&](size_t pos, size_t len, int& out) {
    auto [end, ec] = std::from_chars(text.data() + pos, text.data() + pos + len, out);
    return ec == std::errc() && end == text.data() + pos + len;
  };
  std::tm tm{};
  int year = 0, month = 0;
  if (!num(0, 4, year) || !num(5, 2, month) || !num(8, 2, tm.tm_mday) || !num(11, 2, tm.tm_hour) ||
      !num(14, 2, tm.tm_min) || !num(17, 2, tm.tm_sec)) {
    return std::nullopt;
  }
  if (year < 1970 || month < 1 || month > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
      tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return std::nullopt;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_isdst = -1;  // slurmctld prints its local time
  std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return static_cast<long long>(t);
}

Result<std::vector<PendingJob>> ParsePendingJobs(std::string_view output) {
  std::vector<PendingJob> jobs;
  for (std::string_view line : Lines(output)) {
    std::string_view t = Trim(line);
    if (t.empty()) continue;
    size_t a = t.find('|');
    size_t b = t.rfind('|');
    auto bad = [&] {
      return Fail(ErrorKind::kInvalidInput,
                  "unexpected line in squeue output (expected id|reason|nodes): '" +
                      std::string(t.substr(0, 120)) + "'");
    };
    if (a == std::string_view::npos || a == b || a == 0) return bad();
    PendingJob job;
    job.id = std::string(t.substr(0, a));
    job.reason = std::string(Trim(t.substr(a + 1, b - a - 1)));
    std::string_view n = Trim(t.substr(b + 1));
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), job.nodes);
    if (ec != std::errc() || end != n.data() + n.size() || job.nodes < 0) return bad();
    if (job.nodes == 0) job.nodes = 1;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<std::string>> ExpandHostlist(std::string_view hostlist, size_t limit) {
  std::vector<std::string> out;
  std::string_view s = Trim(hostlist);
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] == '[') ++depth;
    if (i < s.size() && s[i] == ']') --depth;
    if (depth < 0) return Fail(ErrorKind::kInvalidInput, "unbalanced ']' in host list");
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      std::string item(Trim(s.substr(start, i - start)));
      if (!item.empty()) {
        if (auto st = ExpandInto(item, out, limit); !st) return Fail(st.error());
      }
      start = i + 1;
    }
  }
  if (depth != 0) return Fail(ErrorKind::kInvalidInput, "unbalanced '[' in host list");
  return out;
}

Result<std::map<std::string, std::vector<std::string>>> ParseSqueueJobNodes(
    std::string_view output) {
  std::map<std::string, std::vector<std::string>> by_node;
  for (std::string_view line : Lines(output)) {
    line = Trim(line);
    size_t space = line.find(' ');
    std::string job(line.substr(0, space));
    std::string_view list = space == std::string_view::npos ? "" : Trim(line.substr(space + 1));
    if (job.empty()) continue;
    auto names = ExpandHostlist(list);
    if (!names) return Fail(names.error().WithContext("squeue job " + job));
    for (auto& n : *names) by_node[n].push_back(job);
  }
  return by_node;
}

bool IsValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  if (name.front() == '-' || name.front() == '.') return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace onehpc::slurm
