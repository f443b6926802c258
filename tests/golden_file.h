// Golden files for tests: compare a text with testdata/golden/<file>, or rewrite the file when
// CUVIL_UPDATE_GOLDEN=1 (then review the diff). Used by the golden IR and op histogram tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace cuvil::test {

inline void check_golden_file(const std::string& relative_path, const std::string& text) {
  const std::string path = std::string(CUVIL_SOURCE_DIR) + "/" + relative_path;
  const char* update = std::getenv("CUVIL_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden file " << path << " (run with CUVIL_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), text) << "differs from " << path << " (CUVIL_UPDATE_GOLDEN=1 rewrites it)";
}

}  // namespace cuvil::test
