// Parsing context.sh exactly as OpenNebula writes it, and finding the context of this VM.
#ifndef ONEHPC_CONTEXT_CONTEXT_FILE_H_
#define ONEHPC_CONTEXT_CONTEXT_FILE_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace onehpc {

/// Context variables by name (byte-wise sorted, like OpenNebula writes them).
using ContextVars = std::map<std::string, std::string>;

/// Parses the text of a context.sh file.
///
/// Accepts OpenNebula's format (`NAME='value'`, `'\''` escapes, multi-line values, `''`
/// empty, comment and blank lines, CRLF line ends) and, for Packer's build-time context,
/// double-quoted values (bash double-quote rules for `\"`, `\\`, `\$`, `` \` `` and
/// backslash-newline; no expansion is performed, `$x` stays literal) and bare values
/// (no whitespace or shell metacharacters). An optional `export ` prefix is accepted.
/// A later duplicate overrides an earlier one (bash semantics). Anything else — an
/// unterminated quote, a line that is not an assignment, trailing text after a closing
/// quote, a value that bash would expand ($(...), backticks, `$VAR` in a bare or
/// double-quoted value) — is an error of kind kInvalidInput whose message names the line
/// number ("context.sh line 7: ...").
///
/// Details (checked against `env -i bash -c 'set -a; . FILE; env -0'` by the integration
/// test tests/integration/context_bash_oracle_test.cc):
/// - names follow bash: `[A-Za-z_][A-Za-z0-9_]*`; `1A='x'` is an error;
/// - blanks may precede a statement; after the value, blanks and a ` # comment` (a `#`
///   after at least one blank, as in bash) may follow; `A='x'#c` and `A='x'B` are errors
///   (bash would concatenate), as are `A='x' B='y'`, `A='x';`;
/// - CRLF: a `\r` directly before `\n` (or the end of the text) outside a value is dropped
///   (bash would keep it as the last character of the value: a deliberate difference); a `\r`
///   inside a quoted value is kept, exactly as bash keeps it;
/// - bare values may hold only `[A-Za-z0-9_./:,@%+=#^-]` and bytes >= 0x80 (`A=` is empty);
/// - a NUL byte anywhere is an error; other bytes, UTF-8 included, pass through unchanged;
/// - bash's special variables (PATH, UID, RANDOM, ...) get no special treatment.
Result<ContextVars> ParseContextFile(std::string_view text);

/// `NAME='value'` as OpenNebula writes it (a `'` in the value as `'\''`), without a line end:
/// ParseContextFile reads it back as `value`.
std::string FormatContextAssignment(const std::string& name, const std::string& value);

/// Where the variables came from, for logs and `one-hpc context`.
enum class ContextSource { kFile, kSavedNetworkContext, kEnvironment, kContextDirectory, kCdrom };

/// The context of this VM and the OneGate token.
struct LoadedContext {
  ContextVars vars;
  ContextSource source = ContextSource::kFile;
  std::string origin;  ///< the path or "environment"
  /// The OneGate token (never logged): ONEGATE_TOKEN, else TOKENTXT from one_env, else
  /// token.txt beside the context file / in MOUNT_DIR; trimmed. Empty if none was found.
  std::string token;
};

struct ContextLoadOptions {
  /// `--context FILE`: read exactly this file (its directory is searched for token.txt).
  std::optional<std::string> context_file;
  /// Prefix for every system path (`--root`), "" for the real root.
  std::string root;
  /// Take variables from the process environment when one-contextd started us (it exports
  /// every context variable and sets CONTEXT_FILE / MOUNT_DIR).
  bool allow_environment = true;
  /// Tests: use these variables instead of the process environment.
  std::optional<std::map<std::string, std::string>> environment;
};

/// Finds and reads the context. Order: `--context FILE`; the environment when it came from
/// one-contextd (CONTEXT_FILE is set); the saved `/var/run/one-context/context.sh.network`;
/// a `/context/context.sh` directory; otherwise kNotFound. (The CONTEXT CD-ROM comes first
/// for every command: roles/boot_context.h mounts it, passes its context.sh here, unmounts.)
///
/// With CONTEXT_FILE set, the file it names is parsed (source kEnvironment, origin = that
/// path), because the environment cannot be trusted to carry multi-line values exactly;
/// only if it cannot be read are the upper-case environment variables taken (minus the
/// usual process variables: PATH, HOME, LANG, LC_*, MOUNT_DIR, ...), origin "environment".
/// `--context FILE`, CONTEXT_FILE and MOUNT_DIR are used as given; `root` prefixes only the
/// well-known paths. A file that exists but does not parse is an error (no fallback).
/// Token search: ONEGATE_TOKEN; TOKENTXT in `<root>/var/run/one-context/one_env`;
/// `token.txt` beside the context file; `$MOUNT_DIR/token.txt`. It is trimmed and
/// registered with log::AddSecret.
Result<LoadedContext> LoadContext(const ContextLoadOptions& options);

/// Reads TOKENTXT from a one_env file without ever sourcing it: the first
/// `[export ]TOKENTXT="..."` line (double, single or no quotes), trimmed; nullopt if that
/// line is missing, empty or malformed.
std::optional<std::string> ReadTokenFromOneEnv(std::string_view one_env_text);

const char* ToString(ContextSource source);

}  // namespace onehpc

#endif  // ONEHPC_CONTEXT_CONTEXT_FILE_H_
