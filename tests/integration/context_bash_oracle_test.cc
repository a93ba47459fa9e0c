// ParseContextFile against the reference implementation: real /bin/bash sourcing the file
// with every variable exported, in an empty environment:
//
//   env -i /bin/bash -c 'set -a; . "$1"; env -0' bash FILE
//
// For inputs we accept, every variable we return must have exactly bash's value, and bash
// must define no variable we missed. For inputs we reject, the test records why: bash fails
// too, bash would expand or run something, or we are deliberately stricter than bash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "context/context_file.h"
#include "roles/os/process.h"
#include "tests/support/source_dir.h"

namespace onehpc {
namespace {

struct BashRun {
  ContextVars vars;  // every variable in bash's environment after sourcing
  std::string err;
  int exit_code = -1;
};

class BashOracleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/onehpc-bash-oracle-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    // Variables bash itself defines (PWD, SHLVL, _): compared only if the file sets them.
    BashRun empty = RunBash("");
    baseline_ = new std::set<std::string>();
    for (const auto& [name, value] : empty.vars) baseline_->insert(name);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete baseline_;
  }

  static BashRun RunBash(const std::string& text) {
    static int counter = 0;
    std::string path = *dir_ + "/context" + std::to_string(++counter) + ".sh";
    std::ofstream(path, std::ios::binary) << text;
    Command command;
    command.argv = {"/usr/bin/env",
                    "-i",
                    "/bin/bash",
                    "-c",
                    "set -a; . \"$1\"; status=$?; env -0; exit $status",
                    "bash",
                    path};
    command.cwd = *dir_;
    command.timeout = Duration(10000);
    RealProcessRunner runner;
    auto result = runner.Run(command);
    BashRun run;
    if (!result) {
      ADD_FAILURE() << "cannot run bash: " << result.error().message;
      return run;
    }
    run.exit_code = result->exit_code;
    run.err = result->err;
    const std::string& out = result->out;
    for (size_t pos = 0; pos < out.size();) {
      size_t end = out.find('\0', pos);
      if (end == std::string::npos) end = out.size();
      std::string entry = out.substr(pos, end - pos);
      size_t eq = entry.find('=');
      if (eq != std::string::npos) run.vars[entry.substr(0, eq)] = entry.substr(eq + 1);
      pos = end + 1;
    }
    return run;
  }

  // Our result must equal bash's on every variable, and bash must define nothing more.
  static void ExpectSameAsBash(const std::string& label, const std::string& text) {
    SCOPED_TRACE(label);
    auto ours = ParseContextFile(text);
    ASSERT_TRUE(ours) << ours.error().message;
    BashRun bash = RunBash(text);
    EXPECT_EQ(bash.exit_code, 0) << bash.err;
    EXPECT_EQ(bash.err, "");
    for (const auto& [name, value] : *ours) {
      ASSERT_FALSE(baseline_->count(name)) << "test input sets bash's own " << name;
      auto it = bash.vars.find(name);
      if (it == bash.vars.end()) {
        ADD_FAILURE() << "bash does not define " << name;
        continue;
      }
      EXPECT_EQ(it->second, value) << "variable " << name;
    }
    for (const auto& [name, value] : bash.vars) {
      if (!ours->count(name) && !baseline_->count(name)) {
        ADD_FAILURE() << "bash defines " << name << " but ParseContextFile does not";
      }
    }
  }

  static void ExpectRejected(const std::string& label, const std::string& text) {
    auto ours = ParseContextFile(text);
    EXPECT_FALSE(ours) << label << ": parsed, but must be rejected";
    if (!ours) {
      EXPECT_EQ(ours.error().kind, ErrorKind::kInvalidInput) << label;
      EXPECT_EQ(ours.error().message.rfind("context.sh line ", 0), 0u) << label;
    }
  }

  static std::string* dir_;
  static std::set<std::string>* baseline_;
};

std::string* BashOracleTest::dir_ = nullptr;
std::set<std::string>* BashOracleTest::baseline_ = nullptr;

using testing_support::SourceDir;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Case {
  const char* label;
  std::string text;
};

TEST_F(BashOracleTest, AcceptedInputsMatchBash) {
  const std::vector<Case> cases = {
      {"simple", "A='x'\n"},
      {"empty value", "A=''\n"},
      {"escaped quote", "A='it'\\''s'\n"},
      {"escaped quotes at the ends", "A=''\\''x'\\'''\\'''\nB=''\\'''\n"},
      {"multi-line with lookalike", "A='l1\nB=l2'\n"},
      {"multi-line with comment and export lookalikes",
       "A='l1\n# not a comment\n\nexport C='\\''x'\\''\n'\n"},
      {"no expansion in single quotes",
       "A='a b $HOME \\n $(echo pwned) `echo pwned` ${X:-y} \"q\" ~'\n"},
      {"comments and blank lines", "# header\n\n  \n\t# indented\nA='1'\n\n# B='2'\nC='3'\n"},
      {"comment after value", "A='x' # comment\nB='y'\t#c\n"},
      {"trailing blanks", "A='x'   \nB='y'\t\n"},
      {"duplicates", "Z='1'\nA='2'\nZ='3'\n"},
      {"empty file", ""},
      {"no trailing newline", "A='x'\nB='y'"},
      {"bare without newline", "A=bare"},
      {"unicode", "A='héllo wörld ✓ 日本'\nB=ünïcode\n"},
      {"non-UTF-8 bytes", "A='\xff\xfe\x80'\n"},
      {"control characters", "A='\x01\x02\t\x1b[0m\x7f'\n"},
      {"name rules", "_A='1'\na_b9='2'\nlower='3'\n"},
      {"CRLF inside a value", "A='l1\r\nl2'\n"},
      {"double quoted", "START_SCRIPT_BASE64=\"ZWNobyBoaQ==\"\nA=\"it's 'fine'\"\nB=\"\"\n"},
      {"double-quoted escapes", "A=\"q\\\"b\\\\d\\$x\\`c\\n\\t\\'e\"\n"},
      {"double-quoted continuation", "A=\"one \\\ntwo\"\n"},
      {"double-quoted multi-line", "A=\"multi\nline\"\nB=\"l1\r\nl2\"\n"},
      {"bare values",
       "NETWORK=YES\nETH0_IP=10.0.0.5\nB64=ab+/cd==\nURL=http://h:5030/vm\nM=a,b@c%d^e#f-g_h.i\n"},
      {"empty bare values", "A=\nB= # comment\n"},
      {"export prefix", "export A='x'\nexport\tB=y\n  export   C=\"z\"\n"},
      {"export as a name", "export='x'\nexported='y'\n"},
      {"leading blanks", "  A='x'\n\tB='y'\n"},
  };
  for (const auto& c : cases) ExpectSameAsBash(c.label, c.text);
}

TEST_F(BashOracleTest, SampleFilesMatchBash) {
  for (const char* name : {"sample.sh", "worker.sh"}) {
    ExpectSameAsBash(name, ReadText(SourceDir() + "/tests/data/context/" + name));
  }
}

// Inputs bash itself refuses (syntax error or "command not found"): we reject them too.
TEST_F(BashOracleTest, InputsBashFailsOnAreRejected) {
  const std::vector<Case> cases = {
      {"name starting with a digit", "1A='x'\n"},
      {"lone quote", "A='x'\n'\n"},
      {"unterminated single quote", "A='x\n"},
      {"unterminated double quote", "A=\"x\n"},
      {"escaped quote reopens", "A='x'\\''\n"},
      {"garbage line", "hello world\n"},
      {"space before =", "A ='x'\n"},
      {"space after =", "A= 'x'\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    ExpectRejected(c.label, c.text);
    BashRun bash = RunBash(c.text);
    EXPECT_TRUE(bash.exit_code != 0 || !bash.err.empty())
        << "bash accepted it silently; move the case to DeliberatelyStricterThanBash";
  }
}

// Inputs where bash would expand or execute something: rejected. The harmless commands
// show that bash's value is not the literal text.
TEST_F(BashOracleTest, InputsBashWouldExpandAreRejected) {
  const std::vector<Case> cases = {
      {"bare $VAR", "A=$SHLVL\n"},
      {"bare command substitution", "A=$(echo pwned)\n"},
      {"bare backticks", "A=`echo pwned`\n"},
      {"bare tilde", "A=~\n"},
      {"double-quoted $VAR", "A=\"$SHLVL\"\n"},
      {"double-quoted command substitution", "A=\"$(echo pwned)\"\n"},
      {"double-quoted backticks", "A=\"`echo pwned`\"\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    ExpectRejected(c.label, c.text);
    BashRun bash = RunBash(c.text);
    EXPECT_EQ(bash.exit_code, 0) << bash.err;
    ASSERT_TRUE(bash.vars.count("A"));
    EXPECT_EQ(bash.vars["A"].find_first_of("$`~"), std::string::npos)
        << "bash did not expand: " << bash.vars["A"];
  }
}

// Inputs bash accepts but that OpenNebula never writes and that would need a guess about
// intent: rejected on purpose (the header documents each).
TEST_F(BashOracleTest, DeliberatelyStricterThanBash) {
  const std::vector<Case> cases = {
      {"text after closing quote", "A='x'B\n"},
      {"# right after closing quote", "A='x'#c\n"},
      {"two assignments on a line", "A='x' B='y'\n"},
      {"semicolon", "A='x';\n"},
      {"mixed quoting", "A=\"x\"'y'\n"},
      {"quote inside bare value", "A=x'y'\n"},
      {"literal $ in double quotes", "A=\"100$\"\n"},
      {"glob character in bare value", "A=*\n"},
      {"export without value", "export A\n"},
      {"lone carriage return (bash: A=x\\rB=y)", "A='x'\rB='y'\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    ExpectRejected(c.label, c.text);
    BashRun bash = RunBash(c.text);
    EXPECT_EQ(bash.exit_code, 0) << bash.err;
    EXPECT_EQ(bash.err, "");
  }
}

// CRLF files: we drop the \r that ends a line outside a value; bash keeps it as the last
// character of the value. Every value must match bash's up to that one \r.
TEST_F(BashOracleTest, CrlfDiffersOnlyByTheTrailingCarriageReturn) {
  const std::string text = "# header\r\nA='x'\r\nB='l1\r\nl2'\r\nC=bare\r\nD=\"dq\"\r\nE=''\r\n";
  auto ours = ParseContextFile(text);
  ASSERT_TRUE(ours) << ours.error().message;
  BashRun bash = RunBash(text);
  EXPECT_EQ(ours->size(), 5u);
  for (const auto& [name, value] : *ours) {
    ASSERT_TRUE(bash.vars.count(name)) << name;
    EXPECT_EQ(bash.vars[name], value + "\r") << name;
    EXPECT_EQ(value.find('\r') == std::string::npos, name != "B") << name;
  }
}

// Random values with every byte but NUL, written the way OpenNebula writes them (and, a
// second time, double-quoted with bash's escapes): bash, ParseContextFile and the original
// values must all agree.
TEST_F(BashOracleTest, RandomValuesRoundTripThroughBash) {
  std::mt19937 random(20240611);
  const std::string interesting = "'\"\\$`\n\r\t #=~*?[](){};&|<>!\x01\x7f\xc3\xa9\xff";
  for (int file = 0; file < 12; ++file) {
    ContextVars expected;
    std::string single_quoted = "# Context variables generated by OpenNebula\n";
    std::string double_quoted;
    for (int i = 0; i < 25; ++i) {
      std::string name = "V" + std::to_string(file) + "_" + std::to_string(i);
      std::string value;
      int length = static_cast<int>(random() % 24);
      for (int k = 0; k < length; ++k) {
        if (random() % 2) {
          value.push_back(interesting[random() % interesting.size()]);
        } else {
          value.push_back(static_cast<char>(1 + random() % 255));
        }
      }
      expected[name] = value;
      single_quoted += name + "='";
      double_quoted += "export " + name + "=\"";
      for (char c : value) {
        if (c == '\'') {
          single_quoted += "'\\''";
        } else {
          single_quoted.push_back(c);
        }
        if (c == '"' || c == '\\' || c == '$' || c == '`') double_quoted.push_back('\\');
        double_quoted.push_back(c);
      }
      single_quoted += "'\n";
      double_quoted += "\"\n";
    }
    for (const std::string* text : {&single_quoted, &double_quoted}) {
      ExpectSameAsBash("random file " + std::to_string(file), *text);
      auto ours = ParseContextFile(*text);
      ASSERT_TRUE(ours);
      EXPECT_EQ(*ours, expected);
    }
  }
}

}  // namespace
}  // namespace onehpc
