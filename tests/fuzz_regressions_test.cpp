// Suite FuzzRegressions: every file under tests/fuzz/corpus/<target>/ (the seed corpora) and
// tests/fuzz/regressions/<target>/ (one file per fuzzer finding, named after the bug) goes
// through the same entry function the libFuzzer target runs (tests/fuzz/fuzz_entries.h), in
// the ordinary build and under ASan + UBSan in scripts/test.sh, so a finding that comes back
// fails here. One test per file: FuzzRegressions/Replay.File/<target>_<dir>_<file>, and
// FuzzRegressions.EveryFileReplaysClean over all of them.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "cli/npy.h"
#include "runtime/package.h"
#include "tests/compile_in_process.h"
#include "tests/onnx_builder.h"
#include "tests/fuzz/fuzz_entries.h"
#include "tests/fuzz/fuzz_tensor_check.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

struct ReplayCase {
  std::string target;  // fuzz_onnx, fuzz_package, ...
  fs::path file;
  std::string test_name;
};

// Shown by gtest instead of the struct's bytes.
void PrintTo(const ReplayCase& c, std::ostream* os) { *os << c.file; }

using Entry = std::string (*)(const uint8_t*, size_t);

// The one list of fuzz targets the replay knows; a directory for a target not listed here
// fails FuzzRegressions.EveryCorpusDirectoryHasATarget.
struct TargetEntry {
  const char* name;
  Entry entry;
};
const TargetEntry kTargets[] = {
    {"fuzz_package", fuzz::fuzz_package_one},
    {"fuzz_onnx", fuzz::fuzz_onnx_one},
    {"fuzz_npy", fuzz::fuzz_npy_one},
    {"fuzz_pb", fuzz::fuzz_pb_one},
    {"fuzz_config", fuzz::fuzz_config_one},
};

Entry entry_for(const std::string& target) {
  for (const auto& t : kTargets)
    if (target == t.name) return t.entry;
  return nullptr;
}

const fs::path kFuzzDir = fs::path(CUVIL_SOURCE_DIR) / "tests" / "fuzz";

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::vector<ReplayCase> all_cases() {
  std::vector<ReplayCase> cases;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path root = kFuzzDir / kind;
    if (!fs::is_directory(root)) continue;
    for (const auto& target_dir : fs::directory_iterator(root)) {
      if (!target_dir.is_directory()) continue;
      for (const auto& file : fs::directory_iterator(target_dir.path())) {
        if (!file.is_regular_file()) continue;
        const std::string target = target_dir.path().filename().string();
        cases.push_back({target, file.path(),
                         identifier(target + "_" + kind + "_" + file.path().filename().string())});
      }
    }
  }
  std::sort(cases.begin(), cases.end(),
            [](const ReplayCase& a, const ReplayCase& b) { return a.test_name < b.test_name; });
  return cases;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

class Replay : public ::testing::TestWithParam<ReplayCase> {};

TEST_P(Replay, File) {
  const ReplayCase& c = GetParam();
  Entry entry = entry_for(c.target);
  ASSERT_NE(entry, nullptr) << "no fuzz target named '" << c.target << "' (" << c.file << ")";
  std::vector<uint8_t> bytes = read_bytes(c.file);
  EXPECT_EQ(entry(bytes.data(), bytes.size()), "") << c.file;
  if (c.target == "fuzz_package") {
    // The package fuzzer's mutator reseals most mutants; replay that variant too.
    fuzz::reseal_package(bytes.data(), bytes.size());
    EXPECT_EQ(entry(bytes.data(), bytes.size()), "") << c.file << " (resealed)";
  }
}

INSTANTIATE_TEST_SUITE_P(FuzzRegressions, Replay, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<ReplayCase>& info) { return info.param.test_name; });

// The same replay in one test that lists the files when it runs: ctest's list of the per-file
// tests above is made when cuvil_tests is built, so a file added later is caught here first.
TEST(FuzzRegressions, EveryFileReplaysClean) {
  for (const ReplayCase& c : all_cases()) {
    Entry entry = entry_for(c.target);
    if (!entry) continue;  // EveryCorpusDirectoryHasATarget reports it
    std::vector<uint8_t> bytes = read_bytes(c.file);
    EXPECT_EQ(entry(bytes.data(), bytes.size()), "") << c.file;
  }
}

TEST(FuzzRegressions, EveryCorpusDirectoryHasATarget) {
  size_t files = 0;
  for (const ReplayCase& c : all_cases()) {
    EXPECT_NE(entry_for(c.target), nullptr) << c.file;
    ++files;
  }
  // Each target has a seed corpus in the tree.
  for (const auto& t : kTargets)
    EXPECT_TRUE(fs::is_directory(kFuzzDir / "corpus" / t.name)) << "no seed corpus for " << t.name;
  EXPECT_GT(files, 0u);
}

// An empty input is an expected refusal (with a message) for every target.
TEST(FuzzRegressions, EmptyInputsAreRefusedNotFindings) {
  for (const auto& t : kTargets) EXPECT_EQ(t.entry(nullptr, 0), "") << t.name;
}

// The check the tensor-reader targets apply to what they accept can fail.
TEST(FuzzRegressions, TensorCheckReportsInconsistentTensors) {
  tools::HostTensor t;
  t.dtype = 1;  // float
  t.dims = {2};
  t.bytes.resize(8);
  EXPECT_EQ(fuzz::check_host_tensor(t), "");
  t.bytes.resize(4);
  EXPECT_NE(fuzz::check_host_tensor(t), "");
  t.dims = {-1};
  EXPECT_NE(fuzz::check_host_tensor(t), "");
  t.dtype = 8;  // string: not a type the readers accept
  EXPECT_NE(fuzz::check_host_tensor(t), "");
}

// ---- Findings, each with its reproducer in tests/fuzz/regressions/<target>/ ----

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in: " << (text)

// fuzz_pb/huge_dims_allocated_before_data_check: parse_tensor_pb sized the output from the
// dims before comparing them with the data, so 26 bytes asked for terabytes (out of memory).
TEST(FuzzRegressions, PbHugeDimsWithFewValuesIsRefusedBeforeAllocating) {
  onnx::TensorProto t;
  t.add_dims(int64_t{1} << 40);
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_float_data(1.f);
  std::string bytes;
  ASSERT_TRUE(t.SerializeToString(&bytes));
  tools::HostTensor out;
  const std::string err = tools::parse_tensor_pb(
      "huge.pb", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &out);
  EXPECT_MENTIONS(err, "huge.pb: float_data has 1 values but the dims need 1099511627776");

  onnx::TensorProto i;
  i.add_dims(int64_t{1} << 40);
  i.set_data_type(onnx::TensorProto::INT64);
  i.add_int64_data(3);
  ASSERT_TRUE(i.SerializeToString(&bytes));
  const std::string err2 = tools::parse_tensor_pb(
      "huge.pb", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &out);
  EXPECT_MENTIONS(err2, "huge.pb: int64_data has 1 values but the dims need 1099511627776");
}

// fuzz_onnx/node_output_listed_twice: a node naming the same output twice made the importer
// look up the producer of the first one, which is not in the graph's node list yet (an
// out-of-bounds read).
TEST(FuzzRegressions, NodeListingAnOutputTwiceIsInvalid) {
  onnx::ModelProto m = test::make_model();
  onnx::GraphProto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Relu", {"x"}, {"y", "y"}, "relu");
  test::add_output(g, "y");
  EXPECT_TRUE(test::FailsWith([&] { test::compile_package(m); }, ExitCode::kInvalidModel,
                              {"node 'relu' (Relu) lists output 'y' twice"}));
}

// fuzz_onnx/producer_name_invalid_utf8: text from the model (here producer_name, a byte that
// is not UTF-8; also control bytes) went into the manifest as is, and the loader rejected the
// package the compiler had just written.
TEST(FuzzRegressions, ManifestTextFromTheModelIsMadeLoadable) {
  onnx::ModelProto m = test::make_relu_model();
  m.set_producer_name("\xe2" "ackend\x01test");
  m.set_producer_version("1\xff");
  const std::vector<uint8_t> bytes = test::compile_package(m);
  std::shared_ptr<rt::LoadedPackage> pkg;
  const rt::Status st = rt::LoadedPackage::open_memory(bytes.data(), bytes.size(), true, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const std::string* producer = pkg->manifest().find("producer");
  ASSERT_NE(producer, nullptr);
  EXPECT_EQ(*producer, "?ackend?test 1?");
}

// fuzz_onnx/fused_node_without_output: an elementwise node whose output is left unnamed ("")
// was put into a tile kernel, whose store then looked up the missing value (std::out_of_range,
// cuvilc exit 70). Such a node is not fused; the model compiles and its package loads.
TEST(FuzzRegressions, NodeWithUnnamedOutputIsNotFused) {
  onnx::ModelProto m = test::make_model();
  onnx::GraphProto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Relu", {"x"}, {""}, "dead_relu");
  test::add_node(g, "Cast", {"x"}, {""}, "dead_cast");
  test::set_attr_int(g->mutable_node(1), "to", onnx::TensorProto::FLOAT16);
  test::add_node(g, "Neg", {"x"}, {"y"}, "neg");
  test::add_output(g, "y");
  for (bool fuse : {true, false}) {
    const std::vector<uint8_t> bytes = test::compile_package(m, {}, fuse);
    std::shared_ptr<rt::LoadedPackage> pkg;
    const rt::Status st = rt::LoadedPackage::open_memory(bytes.data(), bytes.size(), true, &pkg);
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
}

}  // namespace
}  // namespace cuvil
