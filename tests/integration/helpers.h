// Small helpers the integration tests share: one definition each, so that the test files can
// be compiled together (the ASan build's unity batches) without clashing.
#ifndef ONEHPC_TESTS_INTEGRATION_HELPERS_H_
#define ONEHPC_TESTS_INTEGRATION_HELPERS_H_

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace onehpc::testing {

inline constexpr std::uint64_t kMiB = 1024 * 1024;

/// The whole file (binary), or "" when it cannot be read.
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// True when `program` is found in the PATH (or the usual sbin directories).
inline bool HaveProgram(const std::string& program) {
  for (const char* dir :
       {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    if (::access((std::string(dir) + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace onehpc::testing

#endif  // ONEHPC_TESTS_INTEGRATION_HELPERS_H_
