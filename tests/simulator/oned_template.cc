// escape_attr and oned's template parser, re-implemented from their behaviour:
// - escape_attr walks the text once, opening a quote after each `=` that is not followed by
//   `[` or `"`, and closing it before `,` `[` `]` `\` or a newline; then it turns the two
//   characters `\n` into newlines and closes a quote left open at the end.
// - oned's lexer is a flex scanner (longest match wins, ties go to the earlier rule,
//   characters no rule matches are silently dropped), its grammar a small bison grammar.
#include "tests/simulator/oned_template.h"

#include <algorithm>
#include <cstddef>

namespace onehpc::sim {

std::string EscapeAttr(const std::string& data) {
  std::string out;
  const size_t n = data.size();
  bool escaping = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = data[i];
    const char next = i + 1 < n ? data[i + 1] : '\0';
    // Ruby's attr[idx - 1] at idx 0 reads the last character.
    const char prev = i > 0 ? data[i - 1] : data[n - 1];
    if (c == '=' && escaping) {
      out += c;
    } else if (c == '=' && next != '[' && next != '"') {
      out += "=\"";
      escaping = true;
    } else if (c == ',' && prev != '"') {
      out += "\",";
    } else if (c == '[' && prev != '=' && prev != '"') {
      out += "\"[";
    } else if (c == ']' && prev != '=' && prev != '"') {
      out += "\"]";
      escaping = false;
    } else if (c == '\\' && prev != '"') {
      out += "\"\\";
      escaping = false;
    } else if (c == '\n' && prev != '"') {
      out += "\"\n";
      escaping = false;
    } else {
      out += c;
    }
  }
  std::string result;
  result.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\\' && i + 1 < out.size() && out[i + 1] == 'n') {
      result += '\n';
      ++i;
    } else {
      result += out[i];
    }
  }
  if (escaping && (result.empty() || (result.back() != ']' && result.back() != '"'))) {
    result += '"';
  }
  return result;
}

namespace {

enum class Tok {
  kEnd,
  kEqual,
  kComma,
  kOBracket,
  kCBracket,
  kEqualEmpty,
  kCData,
  kString,
  kVariable,
  kBadString,  // an unquoted value starting with '"' (see the header)
};

const char* TokName(Tok t) {
  switch (t) {
    case Tok::kEnd:
      return "$end";
    case Tok::kEqual:
      return "EQUAL";
    case Tok::kComma:
      return "COMMA";
    case Tok::kOBracket:
      return "OBRACKET";
    case Tok::kCBracket:
      return "CBRACKET";
    case Tok::kEqualEmpty:
      return "EQUAL_EMPTY";
    case Tok::kCData:
      return "CCDATA";
    case Tok::kString:
      return "STRING";
    case Tok::kVariable:
      return "VARIABLE";
    case Tok::kBadString:
      return "STRING";
  }
  return "?";
}

struct Token {
  Tok type = Tok::kEnd;
  std::string text;
  int line = 1;
  int first_column = 0;
  int last_column = 0;
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsAlnumUnderscore(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

class Lexer {
 public:
  explicit Lexer(const std::string& text) : s_(text) {}

  Token Next() {
    while (pos_ < s_.size()) {
      size_t len = 0;
      Tok type = Tok::kEnd;
      bool skip = false;
      if (value_state_) {
        // Rules in order: OBRACKET, CCDATA, quoted STRING, unquoted STRING.
        const size_t lens[4] = {MatchOBracket(), MatchCData(), MatchQuoted(), MatchUnquoted()};
        const Tok types[4] = {Tok::kOBracket, Tok::kCData, Tok::kString, Tok::kString};
        int best = -1;
        for (int r = 0; r < 4; ++r) {
          if (lens[r] > 0 && (best < 0 || lens[r] > lens[best])) best = r;
        }
        if (best < 0) {
          len = 1;  // no rule: flex echoes the character; stay in VALUE
          skip = true;
        } else {
          len = lens[best];
          type = types[best];
          value_state_ = false;
          if (best == 3 && s_[pos_] == '"') type = Tok::kBadString;
        }
      } else {
        // Rules in order: comment, blanks, VARIABLE, EQUAL, EQUAL_EMPTY, COMMA, CBRACKET.
        const size_t lens[7] = {MatchComment(),    MatchWhitespace(), MatchVariable(),
                                MatchEqual(false), MatchEqual(true),  MatchAround(','),
                                MatchAround(']')};
        const Tok types[7] = {Tok::kEnd,        Tok::kEnd,   Tok::kVariable, Tok::kEqual,
                              Tok::kEqualEmpty, Tok::kComma, Tok::kCBracket};
        int best = -1;
        for (int r = 0; r < 7; ++r) {
          if (lens[r] > 0 && (best < 0 || lens[r] > lens[best])) best = r;
        }
        if (best < 0) {
          len = 1;
          skip = true;
        } else {
          len = lens[best];
          type = types[best];
          skip = best <= 1;
          if (best == 3) value_state_ = true;
        }
      }
      std::string text = s_.substr(pos_, len);
      pos_ += len;
      first_column_ = last_column_;
      last_column_ += static_cast<int>(len);
      line_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      if (skip) continue;
      Token t;
      t.type = type;
      t.line = line_;
      t.first_column = first_column_;
      t.last_column = last_column_;
      if (type == Tok::kString) {
        if (!text.empty() && text.front() == '"' && len >= 2 && text.back() == '"' &&
            MatchQuotedAt(pos_ - len) == len) {
          text = text.substr(1, text.size() - 2);
        }
        t.text = Unescape(text);
      } else {
        t.text = text;
      }
      return t;
    }
    Token end;
    end.type = Tok::kEnd;
    end.line = line_;
    end.first_column = first_column_;
    end.last_column = last_column_;
    return end;
  }

 private:
  static std::string Unescape(const std::string& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '\\' && i + 1 < v.size() && v[i + 1] == '"') {
        out += '"';
        ++i;
      } else {
        out += v[i];
      }
    }
    return out;
  }

  size_t MatchComment() const {
    size_t i = pos_;
    while (i < s_.size() && IsBlank(s_[i])) ++i;
    if (i >= s_.size() || s_[i] != '#') return 0;
    while (i < s_.size() && s_[i] != '\n') ++i;
    if (i >= s_.size()) return 0;  // the rule needs the newline
    return i + 1 - pos_;
  }
  size_t MatchWhitespace() const {
    size_t i = pos_;
    while (i < s_.size() && (IsBlank(s_[i]) || s_[i] == '\n')) ++i;
    return i - pos_;
  }
  size_t MatchVariable() const {
    size_t i = pos_;
    while (i < s_.size() && IsAlnumUnderscore(s_[i])) ++i;
    return i - pos_;
  }
  size_t MatchEqual(bool empty) const {
    size_t i = pos_;
    while (i < s_.size() && IsBlank(s_[i])) ++i;
    if (i >= s_.size() || s_[i] != '=') return 0;
    ++i;
    while (i < s_.size() && IsBlank(s_[i])) ++i;
    if (!empty) return i - pos_;
    if (i < s_.size() && s_[i] == '\n') return i + 1 - pos_;
    return 0;
  }
  size_t MatchAround(char c) const {
    size_t i = pos_;
    while (i < s_.size() && (IsBlank(s_[i]) || s_[i] == '\n')) ++i;
    if (i >= s_.size() || s_[i] != c) return 0;
    ++i;
    while (i < s_.size() && (IsBlank(s_[i]) || s_[i] == '\n')) ++i;
    return i - pos_;
  }
  size_t MatchOBracket() const {
    size_t i = pos_;
    while (i < s_.size() && IsBlank(s_[i])) ++i;
    if (i >= s_.size() || s_[i] != '[') return 0;
    ++i;
    while (i < s_.size() && (IsBlank(s_[i]) || s_[i] == '\n')) ++i;
    return i - pos_;
  }
  size_t MatchCData() const {
    size_t end = s_.find('\n', pos_);
    if (end == std::string::npos) end = s_.size();
    const size_t hit = s_.find("]]>", pos_);
    if (hit == std::string::npos || hit + 3 > end) return 0;
    return end - pos_;
  }
  // \"([^\"]|\\\")*\" with flex's longest match: a quote inside the value must follow
  // a backslash; the last quote that can close the value wins.
  size_t MatchQuotedAt(size_t p) const {
    if (p >= s_.size() || s_[p] != '"') return 0;
    size_t best = 0;
    for (size_t k = p + 1; k < s_.size(); ++k) {
      if (s_[k] != '"') continue;
      best = k + 1 - p;
      if (!(k - 1 > p && s_[k - 1] == '\\')) break;
    }
    return best;
  }
  size_t MatchQuoted() const { return MatchQuotedAt(pos_); }
  size_t MatchUnquoted() const {
    size_t i = pos_;
    while (i < s_.size()) {
      const char c = s_[i];
      if (c == '=' || c == '#' || IsBlank(c) || c == '\n' || c == ',' || c == '[' || c == ']') {
        break;
      }
      ++i;
    }
    return i - pos_;
  }

  const std::string& s_;
  size_t pos_ = 0;
  bool value_state_ = false;
  int line_ = 1;
  int first_column_ = 0;
  int last_column_ = 0;
};

std::string ToUpper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

ParsedTemplate SyntaxError(const Token& t, const std::vector<Tok>& expected) {
  ParsedTemplate r;
  std::string msg = "Parse error: syntax error, ";
  if (t.type == Tok::kBadString) {
    msg += "unterminated quoted value";
  } else {
    msg += "unexpected ";
    msg += TokName(t.type);
    for (size_t i = 0; i < expected.size(); ++i) {
      msg += i == 0 ? ", expecting " : " or ";
      msg += TokName(expected[i]);
    }
  }
  msg += " at line " + std::to_string(t.line) + ", columns " + std::to_string(t.first_column) +
         ":" + std::to_string(t.last_column);
  r.error = msg;
  return r;
}

}  // namespace

ParsedTemplate ParseOnedTemplate(const std::string& text) {
  if (!text.empty() && text[0] == '<') {
    ParsedTemplate r;
    r.error = "Parse error: XML Template malformed.";
    return r;
  }
  ParsedTemplate result;
  Lexer lex(text);
  Token tok = lex.Next();
  while (tok.type != Tok::kEnd) {
    if (tok.type != Tok::kVariable) return SyntaxError(tok, {Tok::kEnd, Tok::kVariable});
    TemplateAttribute attr;
    attr.name = ToUpper(tok.text);
    tok = lex.Next();
    if (tok.type == Tok::kEqualEmpty) {
      attr.value = "";
      result.attributes.push_back(std::move(attr));
      tok = lex.Next();
      continue;
    }
    if (tok.type != Tok::kEqual) return SyntaxError(tok, {Tok::kEqual, Tok::kEqualEmpty});
    tok = lex.Next();
    if (tok.type == Tok::kString) {
      attr.value = tok.text;
      result.attributes.push_back(std::move(attr));
      tok = lex.Next();
      continue;
    }
    if (tok.type == Tok::kCData) {
      ParsedTemplate aborted;
      aborted.error = "Parse error.";
      return aborted;
    }
    if (tok.type != Tok::kOBracket) {
      return SyntaxError(tok, {Tok::kOBracket, Tok::kCData, Tok::kString});
    }
    tok = lex.Next();
    if (tok.type != Tok::kCBracket) {
      bool first = true;
      for (;;) {
        if (tok.type != Tok::kVariable) {
          return first ? SyntaxError(tok, {Tok::kCBracket, Tok::kVariable})
                       : SyntaxError(tok, {Tok::kVariable});
        }
        first = false;
        const std::string sub = ToUpper(tok.text);
        tok = lex.Next();
        if (tok.type != Tok::kEqual) return SyntaxError(tok, {Tok::kEqual});
        tok = lex.Next();
        if (tok.type != Tok::kString) return SyntaxError(tok, {Tok::kString});
        attr.vector.insert({sub, tok.text});  // the first value of a repeated key wins
        tok = lex.Next();
        if (tok.type == Tok::kComma) {
          tok = lex.Next();
          continue;
        }
        if (tok.type == Tok::kCBracket) break;
        return SyntaxError(tok, {Tok::kComma, Tok::kCBracket});
      }
    }
    result.attributes.push_back(std::move(attr));
    tok = lex.Next();
  }
  result.ok = true;
  return result;
}

}  // namespace onehpc::sim
