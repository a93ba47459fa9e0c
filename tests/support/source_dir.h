// The source tree the tests read their data from: $ONEHPC_SOURCE_DIR (ctest sets it), else
// the tree this header is in.
#ifndef ONEHPC_TESTS_SUPPORT_SOURCE_DIR_H_
#define ONEHPC_TESTS_SUPPORT_SOURCE_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace onehpc::testing_support {

inline std::string SourceDir() {
  if (const char* dir = std::getenv("ONEHPC_SOURCE_DIR"); dir && *dir) return dir;
  // tests/support/source_dir.h -> the tree's root.
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

}  // namespace onehpc::testing_support

#endif  // ONEHPC_TESTS_SUPPORT_SOURCE_DIR_H_
