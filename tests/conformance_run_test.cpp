// End-to-end conformance: every applicable case of the ONNX backend test data (node,
// pytorch-converted, pytorch-operator, simple) is compiled to a package in memory (import,
// shape inference, lowering, package writer), loaded through the verifying loader, run by a
// session on each test_data_set, and compared with the expected outputs (rtol 1e-3, atol
// 1e-7; exact for integers and bools). Applicable: all cases except training ops, random ops
// and sequence/optional/map/string values. Prints `N passed, M failed`, writes failures
// grouped by op to conformance_report.txt, and fails when the pass count drops below the
// ratchet in tests/conformance/run_floor.txt. CUVIL_CONFORMANCE_CASES=substring limits the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "conformance_case.h"
#include "ir/verifier.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
using conformance::op_label;
using conformance::read_pb;
using conformance::run_case;
const char* kDataRoot = "/usr/share/libonnx-testdata/data";
const char* kSuites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

// Why a case is outside the applicable set, or "".
std::string excluded(const Graph& g) {
  for (const Value& v : g.values)
    if (v.kind != ValueKind::Tensor || v.dtype == DType::String) return "sequence/optional/map/string";
  for (const Node& n : g.nodes) {
    uint32_t f = op_flags(n.op);
    if (f & kTraining) return "training";
    if (f & kRandom) return "random";
    if (f & kSequenceTypes) return "sequence/optional/map/string";
    if (n.op == OpKind::Dropout && n.input(2) != kNoValue) return "random";  // training_mode input
    for (const auto& [k, a] : n.attrs) {
      if (a.g) {
        auto c = excluded(*a.g);
        if (!c.empty()) return c;
      }
    }
  }
  return "";
}

int read_floor() {
  std::ifstream in(std::string(CUVIL_SOURCE_DIR) + "/tests/conformance/run_floor.txt");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') return std::atoi(line.c_str());
  return 0;
}

TEST(Conformance, BackendTestDataEndToEnd) {
  if (!fs::exists(kDataRoot)) GTEST_SKIP() << kDataRoot << " is missing (apt-get install libonnx-testdata)";
  const char* filter = std::getenv("CUVIL_CONFORMANCE_CASES");
  std::vector<fs::path> cases;
  for (const char* suite : kSuites)
    for (const auto& e : fs::directory_iterator(fs::path(kDataRoot) / suite))
      if (fs::exists(e.path() / "model.onnx") &&
          (!filter || e.path().string().find(filter) != std::string::npos))
        cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, std::vector<std::string>> failures;
  for (const fs::path& dir : cases) {
    const std::string label = dir.parent_path().filename().string() + "/" + dir.filename().string();
    Model m;
    try {
      m = frontend::import_onnx_file((dir / "model.onnx").string());
      verify_model(m);
    } catch (const std::exception& e) {
      ++failed;
      failures["(import)"].push_back(label + ": " + e.what());
      continue;
    }
    if (!excluded(*m.graph).empty()) {
      ++skipped;
      continue;
    }
    std::string op = op_label(*m.graph), why;
    try {
      why = run_case(dir, m);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty()) {
      ++passed;
    } else {
      ++failed;
      std::string first_line = why.substr(0, why.find('\n'));
      failures[op].push_back(label + ": " + first_line);
    }
  }
  std::ofstream report("conformance_report.txt");
  report << passed << " passed, " << failed << " failed (" << skipped << " not applicable)\n";
  for (const auto& [op, list] : failures) {
    report << op << " (" << list.size() << ")\n";
    for (const auto& l : list) report << "  " << l << "\n";
  }
  std::printf("[conformance] %d passed, %d failed over %d applicable cases (%d not applicable)\n", passed,
              failed, passed + failed, skipped);
  std::printf("[conformance] report: %s/conformance_report.txt\n", fs::current_path().c_str());
  if (!filter) {
    EXPECT_GE(passed, read_floor()) << "conformance dropped below the ratchet";
  }
}

// Every case that runs compiled both ways gives the same outputs fused (rewrites, tile kernels)
// and unfused (no rewriting pass, only whole-tensor kernels), within the conformance rule.
TEST(Conformance, FusedAndUnfusedAgree) {
  if (!fs::exists(kDataRoot)) GTEST_SKIP() << kDataRoot << " is missing (apt-get install libonnx-testdata)";
  int compared = 0;
  std::vector<std::string> disagree;
  for (const char* suite : kSuites)
    for (const auto& e : fs::directory_iterator(fs::path(kDataRoot) / suite)) {
      const fs::path model = e.path() / "model.onnx";
      if (!fs::exists(model)) continue;
      std::vector<std::shared_ptr<TensorData>> outs[2];
      bool ran = true;
      for (int unfused = 0; unfused < 2 && ran; ++unfused) {
        try {
          Model m = frontend::import_onnx_file(model.string());
          verify_model(m);
          ran = excluded(*m.graph).empty() && run_case(e.path(), m, {unfused == 1}, &outs[unfused]).empty();
        } catch (const std::exception&) {
          ran = false;
        }
      }
      if (!ran) continue;
      ++compared;
      const std::string label = suite + std::string("/") + e.path().filename().string();
      if (outs[0].size() != outs[1].size()) {
        disagree.push_back(label + ": output counts differ");
        continue;
      }
      for (size_t i = 0; i < outs[0].size(); ++i) {
        rt::TensorView view;
        view.dtype = outs[0][i]->dtype;
        view.dims = outs[0][i]->dims;
        view.data = outs[0][i]->bytes.data();
        if (std::string diff = testing::compare_tensors(view, *outs[1][i]); !diff.empty()) {
          disagree.push_back(label + " output " + std::to_string(i) + ": " + diff);
          break;
        }
      }
    }
  std::printf("[conformance] fused vs unfused: %d cases compared, %zu disagree\n", compared, disagree.size());
  EXPECT_GT(compared, 900);
  for (const std::string& d : disagree) ADD_FAILURE() << d;
}

}  // namespace
}  // namespace cuvil
