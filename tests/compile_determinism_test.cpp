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

// cuvilc streams the package as pieces (metadata, then the weights from the model's tensors);
// written in order they are exactly build_package's bytes.
TEST(CompileDeterminism, StreamedPiecesAreThePackage) {
  for (const char* rel : {"examples/digits/digits.onnx", "testdata/models/bert_tiny.onnx"}) {
    Model m = frontend::import_onnx_file(std::string(CUVIL_SOURCE_DIR) + "/" + rel);
    run_passes(m);
    codegen::LoweredModel lowered = codegen::lower_model(m);
    const std::vector<uint8_t> whole = codegen::build_package(m, lowered, "passes: x\n");
    codegen::PackagePieces pieces = codegen::build_package_pieces(m, lowered, "passes: x\n");
    std::vector<uint8_t> joined = pieces.head;
    for (std::string_view w : pieces.weights) joined.insert(joined.end(), w.begin(), w.end());
    EXPECT_EQ(pieces.size, joined.size()) << rel;
    EXPECT_TRUE(joined == whole) << rel;
    EXPECT_GT(pieces.weights.size(), 1u) << rel << ": weights come as several pieces";
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
