// Typed settings: parsing, defaults, validation messages, secrets, JSON and Markdown output.
#include "context/settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/log.h"

namespace onehpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

SettingSpec Bool(std::string name, std::string default_value = "") {
  SettingSpec spec;
  spec.name = std::move(name);
  spec.type = SettingType::kBool;
  spec.default_value = std::move(default_value);
  return spec;
}

SettingSpec Int(std::string name, std::int64_t min, std::int64_t max,
                std::string default_value = "") {
  SettingSpec spec;
  spec.name = std::move(name);
  spec.type = SettingType::kInt;
  spec.min = min;
  spec.max = max;
  spec.default_value = std::move(default_value);
  return spec;
}

SettingSpec Of(std::string name, SettingType type, std::string default_value = "") {
  SettingSpec spec;
  spec.name = std::move(name);
  spec.type = type;
  spec.default_value = std::move(default_value);
  return spec;
}

Settings MustResolve(const std::vector<SettingSpec>& specs, const ContextVars& vars) {
  auto settings = Settings::Resolve(specs, vars);
  EXPECT_TRUE(settings.has_value()) << settings.error().message;
  if (!settings) std::abort();
  return *settings;
}

std::string ResolveError(const std::vector<SettingSpec>& specs, const ContextVars& vars,
                         ErrorKind kind = ErrorKind::kInvalidInput) {
  auto settings = Settings::Resolve(specs, vars);
  EXPECT_FALSE(settings.has_value());
  if (settings) return "";
  EXPECT_EQ(settings.error().kind, kind);
  return settings.error().message;
}

class SettingsTest : public ::testing::Test {
 protected:
  void TearDown() override { log::ClearSecrets(); }
};

// ---- booleans ---------------------------------------------------------------------------

TEST_F(SettingsTest, ParseBoolWords) {
  for (const char* word : {"YES", "yes", "Yes", "TRUE", "true", "1", "ON", "on", "oN"}) {
    EXPECT_EQ(ParseBool(word), true) << word;
  }
  for (const char* word : {"NO", "no", "FALSE", "False", "0", "OFF", "off"}) {
    EXPECT_EQ(ParseBool(word), false) << word;
  }
  for (const char* word : {"", "y", "n", "2", "yes ", "enable", "YESS", "-1", "00"}) {
    EXPECT_EQ(ParseBool(word), std::nullopt) << word;
  }
}

TEST_F(SettingsTest, BoolValuesDefaultsAndTrimming) {
  Settings s = MustResolve(
      {Bool("A", "NO"), Bool("B", "YES"), Bool("C", "YES"), Bool("D"), Bool("E", "no"), Bool("F")},
      {{"A", " true\n"}, {"B", ""}, {"D", "off"}, {"F", "  "}});
  EXPECT_TRUE(s.GetBool("A"));
  EXPECT_TRUE(s.GetBool("B"));  // empty -> default
  EXPECT_TRUE(s.GetBool("C"));  // absent -> default
  EXPECT_FALSE(s.GetBool("D"));
  EXPECT_FALSE(s.GetBool("E"));
  EXPECT_FALSE(s.GetBool("F"));  // blank, no default
  EXPECT_TRUE(s.IsSet("A"));
  EXPECT_FALSE(s.IsSet("B"));
  EXPECT_FALSE(s.IsSet("C"));
  EXPECT_TRUE(s.IsSet("D"));
  EXPECT_FALSE(s.IsSet("F"));
}

TEST_F(SettingsTest, BadBoolNamesVariableValueAndWords) {
  EXPECT_EQ(ResolveError({Bool("ONEAPP_LDAP_ENABLE", "NO")}, {{"ONEAPP_LDAP_ENABLE", "maybe"}}),
            "ONEAPP_LDAP_ENABLE='maybe': not a boolean; expected one of YES, NO, TRUE, FALSE, "
            "1, 0, ON, OFF (case-insensitive); leave it empty for the default (NO)");
}

// ---- integers ---------------------------------------------------------------------------

TEST_F(SettingsTest, IntValues) {
  Settings s = MustResolve({Int("A", 1, 100, "10"), Int("B", 1, 100, "10"), Int("C", -5, 5),
                            Int("D", INT64_MIN, INT64_MAX), Int("E", 0, 10), Int("F", 0, 10, "3")},
                           {{"A", " 42 "}, {"C", "-5"}, {"D", "+9223372036854775807"}, {"F", ""}});
  EXPECT_EQ(s.GetInt("A"), 42);
  EXPECT_EQ(s.GetInt("B"), 10);
  EXPECT_EQ(s.GetInt("C"), -5);
  EXPECT_EQ(s.GetInt("D"), INT64_MAX);
  EXPECT_EQ(s.GetInt("E"), 0);  // no value, no default
  EXPECT_FALSE(s.IsSet("E"));
  EXPECT_EQ(s.GetInt("F"), 3);
}

TEST_F(SettingsTest, BadInts) {
  auto error = [](const char* value) { return ResolveError({Int("N", 1, 100)}, {{"N", value}}); };
  EXPECT_EQ(error("0"), "N='0': out of range; expected a decimal integer between 1 and 100");
  EXPECT_EQ(error("101"), "N='101': out of range; expected a decimal integer between 1 and 100");
  EXPECT_EQ(error("12abc"),
            "N='12abc': not a whole number; expected a decimal integer between 1 and 100");
  for (const char* bad : {"1.5", "0x10", "--1", "+-1", "1 2", "+", "-", "1e3", "١٢"}) {
    EXPECT_THAT(error(bad), HasSubstr("not a whole number")) << bad;
  }
  EXPECT_THAT(error("99999999999999999999"), HasSubstr("the number is out of range"));
  EXPECT_EQ(ResolveError({Int("N", 5, INT64_MAX)}, {{"N", "4"}}),
            "N='4': out of range; expected a decimal integer of at least 5");
  EXPECT_EQ(ResolveError({Int("N", INT64_MIN, 5)}, {{"N", "x"}}),
            "N='x': not a whole number; expected a decimal integer of at most 5");
  EXPECT_EQ(ResolveError({Int("N", INT64_MIN, INT64_MAX)}, {{"N", "x"}}),
            "N='x': not a whole number; expected a decimal integer");
}

// ---- enums, lists, strings --------------------------------------------------------------

TEST_F(SettingsTest, EnumIsCaseInsensitiveAndCanonical) {
  SettingSpec role = Of("ONEAPP_ROLE", SettingType::kEnum, "worker");
  role.choices = {"controller", "worker"};
  EXPECT_EQ(MustResolve({role}, {{"ONEAPP_ROLE", " Controller "}}).GetString("ONEAPP_ROLE"),
            "controller");
  EXPECT_EQ(MustResolve({role}, {{"ONEAPP_ROLE", ""}}).GetString("ONEAPP_ROLE"), "worker");
  EXPECT_EQ(ResolveError({role}, {{"ONEAPP_ROLE", "portal"}}),
            "ONEAPP_ROLE='portal': expected one of: controller, worker; leave it empty for the "
            "default (worker)");
}

TEST_F(SettingsTest, ListsSplitOnCommasAndWhitespace) {
  SettingSpec list = Of("L", SettingType::kList);
  list.pattern = "[a-z0-9.-]+";
  list.expected = "a host name";
  Settings s = MustResolve({list, Of("M", SettingType::kList, "x,y"), Of("N", SettingType::kList)},
                           {{"L", " a, b  c,,d\ne\t"}});
  EXPECT_THAT(s.GetList("L"), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(s.GetList("M"), ElementsAre("x", "y"));
  EXPECT_THAT(s.GetList("N"), IsEmpty());
  EXPECT_EQ(ResolveError({list}, {{"L", "ok, Bad_Host"}}),
            "L='ok, Bad_Host': item 2 'Bad_Host' is not valid; expected a list separated by "
            "commas or spaces, each item a host name");
}

TEST_F(SettingsTest, StringsKeepTheirTextButMustBeOneLine) {
  SettingSpec nfs = Of("ONEAPP_SLURM_NFS_HOME", SettingType::kString);
  nfs.pattern = R"([^:\s]+:/\S*)";
  nfs.expected = "host:/export";
  Settings s = MustResolve({nfs, Of("T", SettingType::kString, "dflt")},
                           {{"ONEAPP_SLURM_NFS_HOME", "10.0.0.9:/export/home"}, {"T", " a b "}});
  EXPECT_EQ(s.GetString("ONEAPP_SLURM_NFS_HOME"), "10.0.0.9:/export/home");
  EXPECT_EQ(s.GetString("T"), " a b ");
  EXPECT_EQ(ResolveError({nfs}, {{"ONEAPP_SLURM_NFS_HOME", "nohost"}}),
            "ONEAPP_SLURM_NFS_HOME='nohost': expected host:/export");
  EXPECT_EQ(ResolveError({Of("T", SettingType::kString)}, {{"T", "two\nlines"}}),
            "T='two\\nlines': must be a single line of text");
  SettingSpec raw = Of("R", SettingType::kString);
  raw.pattern = "[0-9]+";
  EXPECT_EQ(ResolveError({raw}, {{"R", "x"}}),
            "R='x': expected text matching the regular expression [0-9]+");
}

TEST_F(SettingsTest, LongAndControlValuesAreShownSafely) {
  std::string message = ResolveError({Bool("B")}, {{"B", std::string(200, 'y') + "\x01"}});
  EXPECT_THAT(message, HasSubstr("B='" + std::string(80, 'y') + "...'"));
  EXPECT_THAT(ResolveError({Bool("B")}, {{"B", "a\tb\x7f"}}), HasSubstr("B='a\\tb\\x7f'"));
}

// ---- base64 -----------------------------------------------------------------------------

TEST_F(SettingsTest, DecodeBase64Rfc4648Vectors) {
  EXPECT_EQ(DecodeBase64(""), "");
  EXPECT_EQ(DecodeBase64("Zg=="), "f");
  EXPECT_EQ(DecodeBase64("Zm8="), "fo");
  EXPECT_EQ(DecodeBase64("Zm9v"), "foo");
  EXPECT_EQ(DecodeBase64("Zm9vYg=="), "foob");
  EXPECT_EQ(DecodeBase64("Zm9vYmE="), "fooba");
  EXPECT_EQ(DecodeBase64("Zm9vYmFy"), "foobar");
}

TEST_F(SettingsTest, DecodeBase64PaddingIsOptionalButMustBeRight) {
  EXPECT_EQ(DecodeBase64("Zg"), "f");
  EXPECT_EQ(DecodeBase64("Zm8"), "fo");
  EXPECT_EQ(DecodeBase64("Zm9v\nYmFy\r\n"), "foobar");  // wrapped base64 output
  EXPECT_EQ(DecodeBase64(" Zm9v YmE= "), "fooba");
  EXPECT_EQ(DecodeBase64("+/+/"), std::string("\xfb\xff\xbf", 3));
  EXPECT_EQ(DecodeBase64("Zg="), std::nullopt);    // wrong padding
  EXPECT_EQ(DecodeBase64("Zg==="), std::nullopt);  // too much padding
  EXPECT_EQ(DecodeBase64("Zm9v="), std::nullopt);
  EXPECT_EQ(DecodeBase64("Z"), std::nullopt);  // impossible length
  EXPECT_EQ(DecodeBase64("Zm9vY"), std::nullopt);
  EXPECT_EQ(DecodeBase64("Zh=="), std::nullopt);  // non-zero unused bits
  EXPECT_EQ(DecodeBase64("Zm9="), std::nullopt);
  EXPECT_EQ(DecodeBase64("Zg==Zg=="), std::nullopt);  // padding in the middle
  EXPECT_EQ(DecodeBase64("Zm9v-_"), std::nullopt);    // URL-safe alphabet
  EXPECT_EQ(DecodeBase64("Zm9v!"), std::nullopt);
}

TEST_F(SettingsTest, Text64IsDecoded) {
  Settings s = MustResolve({Of("S", SettingType::kText64), Of("D", SettingType::kText64, "aGk=")},
                           {{"S", "bXVsdGkKbGluZQ=="}});
  EXPECT_EQ(s.GetString("S"), "multi\nline");
  EXPECT_EQ(s.GetString("D"), "hi");
  EXPECT_EQ(ResolveError({Of("S", SettingType::kText64)}, {{"S", "not base64!"}}),
            "S='not base64!': not valid base64 (the character at position 11 is not in the "
            "base64 alphabet A-Z a-z 0-9 + /); expected the base64 encoding of the text (e.g. "
            "the output of base64 -w0)");
}

// ---- secrets ----------------------------------------------------------------------------

TEST_F(SettingsTest, PasswordsAreMaskedAndRedacted) {
  SettingSpec password = Of("ONEAPP_LDAP_ADMIN_PASSWORD", SettingType::kPassword);
  Settings s = MustResolve({password}, {{"ONEAPP_LDAP_ADMIN_PASSWORD", "s3cr3t-'pa$$"}});
  EXPECT_EQ(s.GetString("ONEAPP_LDAP_ADMIN_PASSWORD"), "s3cr3t-'pa$$");
  EXPECT_EQ(s.ToJson(false)["ONEAPP_LDAP_ADMIN_PASSWORD"]["value"], "********");
  EXPECT_EQ(s.ToJson(true)["ONEAPP_LDAP_ADMIN_PASSWORD"]["value"], "s3cr3t-'pa$$");
  EXPECT_EQ(log::Redact("bind with s3cr3t-'pa$$ now"), "bind with <redacted> now");
}

TEST_F(SettingsTest, ErrorsNeverShowSecretValues) {
  SettingSpec password = Of("PW", SettingType::kPassword);
  password.pattern = "[a-z]{12,}";
  password.expected = "at least 12 lower-case letters";
  SettingSpec key = Of("ONEAPP_MUNGE_KEY_BASE64", SettingType::kText64);
  key.secret = true;
  SettingSpec tokens = Of("TOKENS", SettingType::kList);
  tokens.secret = true;
  tokens.pattern = "[a-z]+";
  std::string message =
      ResolveError({password, key, tokens}, {{"PW", "Hunter2-pass\nword"},
                                             {"ONEAPP_MUNGE_KEY_BASE64", "c2VjcmV0!a2V5"},
                                             {"TOKENS", "abcd, SECRET-ITEM"}});
  EXPECT_THAT(message, Not(HasSubstr("Hunter2")));
  EXPECT_THAT(message, Not(HasSubstr("c2VjcmV0")));
  EXPECT_THAT(message, Not(HasSubstr("SECRET-ITEM")));
  EXPECT_EQ(message,
            "PW=<secret, not shown>: must be a single line of text\n"
            "ONEAPP_MUNGE_KEY_BASE64=<secret, not shown>: not valid base64 (the character at "
            "position 9 is not in the base64 alphabet A-Z a-z 0-9 + /); expected the base64 "
            "encoding of the text (e.g. the output of base64 -w0)\n"
            "TOKENS=<secret, not shown>: item 2 is not valid; expected a list separated by "
            "commas or spaces, each item text matching the regular expression [a-z]+");
  // Even invalid secrets are redacted from logs from now on.
  EXPECT_EQ(log::Redact("x c2VjcmV0!a2V5 y"), "x <redacted> y");
}

TEST_F(SettingsTest, SecretText64IsRedactedEncodedAndDecoded) {
  SettingSpec key = Of("K", SettingType::kText64);
  key.secret = true;
  Settings s = MustResolve({key}, {{"K", "bXVuZ2Uta2V5LWJ5dGVz"}});  // munge-key-bytes
  EXPECT_EQ(s.GetString("K"), "munge-key-bytes");
  EXPECT_EQ(log::Redact("bXVuZ2Uta2V5LWJ5dGVz munge-key-bytes"), "<redacted> <redacted>");
  EXPECT_EQ(s.ToJson(false)["K"]["value"], "********");
}

// ---- several errors at once, required, programming errors in specs ----------------------

TEST_F(SettingsTest, AllBadVariablesAreReportedOnePerLine) {
  SettingSpec role = Of("ROLE", SettingType::kEnum);
  role.choices = {"a", "b"};
  SettingSpec required = Of("NEEDED", SettingType::kString);
  required.required = true;
  required.description = "the controller's address";
  std::string message =
      ResolveError({Bool("B1"), Int("I1", 0, 9), role, Bool("OK"), required},
                   {{"B1", "perhaps"}, {"I1", "10"}, {"ROLE", "c"}, {"OK", "yes"}, {"NEEDED", ""}});
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 3);
  EXPECT_THAT(message, HasSubstr("B1='perhaps': not a boolean"));
  EXPECT_THAT(message, HasSubstr("\nI1='10': out of range"));
  EXPECT_THAT(message, HasSubstr("\nROLE='c': expected one of: a, b"));
  EXPECT_THAT(message, HasSubstr("\nNEEDED is required but empty: the controller's address"));
  EXPECT_THAT(message, Not(HasSubstr("OK")));
}

TEST_F(SettingsTest, RequiredAbsentAndWithDefault) {
  SettingSpec required = Of("NEEDED", SettingType::kString);
  required.required = true;
  EXPECT_EQ(ResolveError({required}, {}), "NEEDED is required but not set: give it a value");
  required.default_value = "fallback";
  EXPECT_EQ(MustResolve({required}, {}).GetString("NEEDED"), "fallback");
}

TEST_F(SettingsTest, SpecMistakesAreInternalErrors) {
  EXPECT_THAT(ResolveError({Bool("A"), Bool("A")}, {}, ErrorKind::kInternal),
              HasSubstr("declared twice"));
  EXPECT_THAT(ResolveError({Bool("A", "maybe")}, {}, ErrorKind::kInternal),
              HasSubstr("the default value of setting A is invalid"));
  SettingSpec bad_regex = Of("R", SettingType::kString);
  bad_regex.pattern = "([";
  EXPECT_THAT(ResolveError({bad_regex}, {}, ErrorKind::kInternal), HasSubstr("invalid pattern"));
  EXPECT_THAT(ResolveError({Of("E", SettingType::kEnum)}, {}, ErrorKind::kInternal),
              HasSubstr("no choices"));
}

// ---- output -----------------------------------------------------------------------------

TEST_F(SettingsTest, ToJsonTypesAndSources) {
  SettingSpec role = Of("ROLE", SettingType::kEnum, "worker");
  role.choices = {"controller", "worker"};
  SettingSpec bin = Of("BIN", SettingType::kText64);
  Settings s = MustResolve(
      {Bool("B", "NO"), Int("I", 0, 9), role, Of("L", SettingType::kList), bin,
       Of("P", SettingType::kPassword), Of("S", SettingType::kString)},
      {{"B", "on"}, {"I", "7"}, {"L", "x y"}, {"BIN", "/w=="}, {"S", "caf\xc3\xa9\xff"}});
  nlohmann::json expected = nlohmann::json::parse(R"({
    "B": {"value": true, "source": "context", "type": "bool"},
    "I": {"value": 7, "source": "context", "type": "int"},
    "ROLE": {"value": "worker", "source": "default", "type": "enum"},
    "L": {"value": ["x", "y"], "source": "context", "type": "list"},
    "BIN": {"value": "<binary data, 1 bytes>", "source": "context", "type": "text64"},
    "P": {"value": null, "source": "default", "type": "password"},
    "S": {"value": "café\ufffd", "source": "context", "type": "string"}
  })");
  EXPECT_EQ(s.ToJson(false), expected);
  EXPECT_NO_THROW(s.ToJson(true).dump());
}

TEST_F(SettingsTest, MarkdownTable) {
  SettingSpec role = Of("ONEAPP_ROLE", SettingType::kEnum, "worker");
  role.choices = {"controller", "worker"};
  role.roles = {"controller", "worker"};
  role.description = "What this VM becomes.";
  SettingSpec nodes = Int("ONEAPP_NODES", 1, 64, "4");
  nodes.roles = {"controller"};
  nodes.description = "Maximum | count\nof nodes.";
  SettingSpec needed = Of("ONEAPP_CONTROLLER", SettingType::kString);
  needed.required = true;
  needed.roles = {"worker"};
  EXPECT_EQ(SettingsMarkdownTable({role, nodes, needed}),
            "| Variable | Roles | Type | Default | Description |\n"
            "|---|---|---|---|---|\n"
            "| `ONEAPP_ROLE` | controller, worker | enum: `controller`, `worker` | `worker` | "
            "What this VM becomes. |\n"
            "| `ONEAPP_NODES` | controller | int between 1 and 64 | `4` | Maximum \\| count of "
            "nodes. |\n"
            "| `ONEAPP_CONTROLLER` | worker | string | (required) |  |\n");
}

TEST_F(SettingsTest, TypeNames) {
  EXPECT_STREQ(ToString(SettingType::kBool), "bool");
  EXPECT_STREQ(ToString(SettingType::kInt), "int");
  EXPECT_STREQ(ToString(SettingType::kString), "string");
  EXPECT_STREQ(ToString(SettingType::kPassword), "password");
  EXPECT_STREQ(ToString(SettingType::kText64), "text64");
  EXPECT_STREQ(ToString(SettingType::kEnum), "enum");
  EXPECT_STREQ(ToString(SettingType::kList), "list");
}

// ---- typos in the context

TEST_F(SettingsTest, AnUnknownOneappVariableIsNamedWithTheClosestKnownSetting) {
  std::vector<SettingSpec> known = {Int("ONEAPP_SLURM_MAX_NODES", 1, 64),
                                    Of("ONEAPP_SLURM_PARTITION", SettingType::kString),
                                    Bool("REPORT_READY")};
  auto warnings = UnknownSettingWarnings(known, {{"ONEAPP_SLURM_MAX_NODE", "5"},
                                                 {"ONEAPP_SLRUM_PARTITION", "hpc"},
                                                 {"ONEAPP_SLURM_MAX_NODES", "4"},
                                                 {"ONEAPP_COMPLETELY_ELSE", "x"},
                                                 {"ETH0_IP", "10.0.0.1"},
                                                 {"REPORT_READY", "YES"}});
  EXPECT_THAT(
      warnings,
      ElementsAre("ONEAPP_COMPLETELY_ELSE is not a setting of one-hpc and is ignored (no known "
                  "setting is close; `one-hpc settings --all` lists them)",
                  "ONEAPP_SLRUM_PARTITION is not a setting of one-hpc and is ignored: did you "
                  "mean ONEAPP_SLURM_PARTITION?",
                  "ONEAPP_SLURM_MAX_NODE is not a setting of one-hpc and is ignored: did you "
                  "mean ONEAPP_SLURM_MAX_NODES?"));
  // Names only: the value of a misspelt password never reaches the log.
  auto secret = UnknownSettingWarnings(known, {{"ONEAPP_SLURM_PASWORD", "hunter2hunter2"}});
  ASSERT_EQ(secret.size(), 1u);
  EXPECT_THAT(secret[0], Not(HasSubstr("hunter2")));
  EXPECT_THAT(UnknownSettingWarnings(known, {{"ONEAPP_SLURM_MAX_NODES", "4"}}), IsEmpty());
}

// ---- programming errors -----------------------------------------------------------------

TEST(SettingsDeathTest, UnknownNameAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Settings s = MustResolve({Bool("A")}, {});
  EXPECT_DEATH(s.GetBool("NOPE"),
               "programming error: setting NOPE was read with GetBool but is "
               "not declared");
  EXPECT_DEATH(s.IsSet("NOPE"), "setting NOPE was read with IsSet but is not declared");
}

TEST(SettingsDeathTest, WrongTypeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Settings s = MustResolve({Bool("A"), Of("S", SettingType::kString)}, {});
  EXPECT_DEATH(s.GetInt("A"),
               "programming error: setting A is of type bool but was read with "
               "GetInt");
  EXPECT_DEATH(s.GetList("S"), "setting S is of type string but was read with GetList");
  EXPECT_DEATH(s.GetString("A"), "setting A is of type bool but was read with GetString");
}

}  // namespace
}  // namespace onehpc
