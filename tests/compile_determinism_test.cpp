// Deterministic artifacts (DESIGN.md principle 5): compiling the same model twice gives
// byte-identical packages, in-process and through cuvilc run from different directories with
// different locale and time-zone settings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "frontend/onnx_import.h"
#include "passes/pipeline.h"

namespace cuvil {
namespace {

std::vector<uint8_t> compile_bytes(const std::string& path) {
  Model m = frontend::import_onnx_file(path);
  run_passes(m);
  return codegen::build_package(m, codegen::lower_model(m));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(CompileDeterminism, SameModelTwiceInProcess) {
  for (const char* rel : {"examples/digits/digits.onnx", "testdata/models/bert_tiny.onnx"}) {
    std::string path = std::string(CUVIL_SOURCE_DIR) + "/" + rel;
    auto a = compile_bytes(path);
    auto b = compile_bytes(path);
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << rel << " compiled to different bytes";
  }
}

TEST(CompileDeterminism, CuvilcAcrossDirectoriesLocalesAndTimeZones) {
  char tmpl[] = "/tmp/cuvil_det_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, model = std::string(CUVIL_SOURCE_DIR) + "/examples/digits/digits.onnx";
  std::string cmd1 = "cd " + dir + " && TZ=UTC LC_ALL=C " + CUVIL_CUVILC + " compile " + model + " -o a.cuvir 2>/dev/null";
  std::string cmd2 = "mkdir -p " + dir + "/sub && cd " + dir + "/sub && TZ=Asia/Kolkata LC_ALL=C.UTF-8 " + CUVIL_CUVILC +
                     " compile " + model + " -o ../b.cuvir 2>/dev/null";
  ASSERT_EQ(std::system(cmd1.c_str()), 0);
  ASSERT_EQ(std::system(cmd2.c_str()), 0);
  std::string a = slurp(dir + "/a.cuvir"), b = slurp(dir + "/b.cuvir");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "cuvilc output depends on directory, locale or time zone";
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace cuvil
