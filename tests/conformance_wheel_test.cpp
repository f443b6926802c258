// End-to-end conformance on the current onnx wheel's backend node cases (onnx 1.23.2: opset 28,
// IR 14), next to the ONNX 1.12 suite of conformance_run_test.cpp and with the same harness
// (conformance_case.h) and comparison rule (rtol 1e-3, atol 1e-7, exact for integers). The cases
// are not checked in: tests/onnx_wheel/make_cases.sh BUILD_DIR writes them into
// BUILD_DIR/onnx-wheel-cases/node/ (scripts/test.sh runs it first); CUVIL_WHEEL_CASES names
// another folder. Applicable, decided on the model file before import so that the ONNX Runtime
// count (tests/onnx_wheel/count_ort.py) applies the very same rule: every graph input and output
// is a tensor of a type ONNX 1.12 had other than string (no float8, float4, 4-bit or 2-bit
// integers), and no node, in any subgraph, is a training op (domain ai.onnx.preview.training) or
// a random one (RandomNormal[Like], RandomUniform[Like], Bernoulli, Multinomial, Dropout given
// training_mode). A case that cuvil refuses counts as failed. Two checks: the pass count is at
// least the ratchet in tests/conformance/wheel_floor.txt, and every case named in
// tests/onnx_wheel/expected_pass.txt passes (CUVIL_UPDATE_GOLDEN=1 rewrites that list from this
// run). Failures, grouped by op, go to conformance_wheel_report.txt in the working folder.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "conformance_case.h"
#include "ir/verifier.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

// The case folder: CUVIL_WHEEL_CASES, else onnx-wheel-cases/node in the build folder above the
// test binary (build/tests/cuvil_tests -> build/onnx-wheel-cases/node).
fs::path cases_root() {
  if (const char* env = std::getenv("CUVIL_WHEEL_CASES")) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return exe.parent_path().parent_path() / "onnx-wheel-cases" / "node";
}

// onnx.TensorProto.DataType codes of ONNX 1.12 (1..16) without STRING (8).
bool onnx112_tensor_type(const onnx::TypeProto& t) {
  if (!t.has_tensor_type()) return false;
  int e = t.tensor_type().elem_type();
  return e >= 1 && e <= 16 && e != onnx::TensorProto::STRING;
}

std::string excluded_node(const onnx::GraphProto& g);

std::string excluded_node(const onnx::NodeProto& n) {
  static const std::set<std::string> kRandom = {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                                "RandomUniformLike", "Bernoulli", "Multinomial"};
  if (n.domain() == "ai.onnx.preview.training") return "training";
  if ((n.domain().empty() || n.domain() == "ai.onnx") &&
      (kRandom.count(n.op_type()) || (n.op_type() == "Dropout" && n.input_size() > 2 && !n.input(2).empty())))
    return "random";
  for (const auto& a : n.attribute()) {
    if (a.has_g())
      if (auto why = excluded_node(a.g()); !why.empty()) return why;
    for (const auto& sub : a.graphs())
      if (auto why = excluded_node(sub); !why.empty()) return why;
  }
  return "";
}

std::string excluded_node(const onnx::GraphProto& g) {
  for (const auto& n : g.node())
    if (auto why = excluded_node(n); !why.empty()) return why;
  return "";
}

// Why the case is outside the applicable set, or "" (the rule above; count_ort.py has its twin).
std::string excluded(const onnx::ModelProto& m) {
  for (const auto& v : m.graph().input())
    if (!onnx112_tensor_type(v.type())) return "input type";
  for (const auto& v : m.graph().output())
    if (!onnx112_tensor_type(v.type())) return "output type";
  return excluded_node(m.graph());
}

int read_floor() {
  std::ifstream in(std::string(CUVIL_SOURCE_DIR) + "/tests/conformance/wheel_floor.txt");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') return std::atoi(line.c_str());
  return 0;
}

const std::string kExpectedList = std::string(CUVIL_SOURCE_DIR) + "/tests/onnx_wheel/expected_pass.txt";

std::vector<std::string> read_expected() {
  std::ifstream in(kExpectedList);
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') names.push_back(line);
  return names;
}

TEST(ConformanceWheel, NodeCasesEndToEnd) {
  const fs::path root = cases_root();
  // Not a skip: the cases are part of the test run (scripts/test.sh makes them).
  ASSERT_TRUE(fs::is_directory(root)) << root << " is missing: run tests/onnx_wheel/make_cases.sh BUILD_DIR "
                                      << "(or set CUVIL_WHEEL_CASES to the node cases folder)";
  const char* filter = std::getenv("CUVIL_CONFORMANCE_CASES");
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx") && (!filter || e.path().string().find(filter) != std::string::npos))
      cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, std::vector<std::string>> failures;
  std::set<std::string> passing;
  for (const fs::path& dir : cases) {
    const std::string name = dir.filename().string();
    onnx::ModelProto proto;
    {
      std::ifstream in(dir / "model.onnx", std::ios::binary);
      ASSERT_TRUE(in && proto.ParseFromIstream(&in)) << "cannot parse " << dir / "model.onnx";
    }
    if (!excluded(proto).empty()) {
      ++skipped;
      continue;
    }
    std::string op = "(import)", why;
    try {
      Model m = frontend::import_onnx_file((dir / "model.onnx").string());
      verify_model(m);
      op = conformance::op_label(*m.graph);
      why = conformance::run_case(dir, m);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty()) {
      ++passed;
      passing.insert(name);
    } else {
      ++failed;
      failures[op].push_back(name + ": " + why.substr(0, why.find('\n')));
    }
  }
  std::ofstream report("conformance_wheel_report.txt");
  report << passed << " passed, " << failed << " failed (" << skipped << " not applicable)\n";
  for (const auto& [op, list] : failures) {
    report << op << " (" << list.size() << ")\n";
    for (const auto& l : list) report << "  " << l << "\n";
  }
  std::printf("[conformance-wheel] %d passed, %d failed over %d applicable cases (%d not applicable)\n", passed,
              failed, passed + failed, skipped);
  std::printf("[conformance-wheel] report: %s/conformance_wheel_report.txt\n", fs::current_path().c_str());
  if (filter) return;
  if (std::getenv("CUVIL_UPDATE_GOLDEN")) {
    std::ofstream out(kExpectedList);
    out << "# Cases of the onnx 1.23.2 wheel's node suite that cuvil passes (ConformanceWheel); one per\n"
           "# line. Rewritten by CUVIL_UPDATE_GOLDEN=1 ctest -R ConformanceWheel; a case may leave only\n"
           "# with a reason in the commit.\n";
    for (const auto& n : passing) out << n << "\n";
  }
  EXPECT_GE(passed, read_floor()) << "wheel conformance dropped below the ratchet";
  for (const std::string& n : read_expected())
    EXPECT_TRUE(passing.count(n)) << n << " is listed in tests/onnx_wheel/expected_pass.txt but did not pass";
}

// Every applicable case that runs compiled both ways gives the same outputs fused (rewrites, tile
// kernels) and unfused (no rewriting pass, only whole-tensor kernels), within the conformance
// rule (bfloat16: see agree()): the expansions of frontend/newer_ops.h feed the passes (fuse-attention on Attention's
// ops, canonicalize, fuse-epilogues), whose rewrites must be exact.
// The conformance rule, except for bfloat16 outputs: there a fused chain (tile kernels keep
// float32 between its ops) and the unfused one (each op rounds to bfloat16) differ by the
// roundings they skip; two bfloat16 steps (2^-6 relative) is what the Attention cases' softmax
// chains show, far above rtol 1e-3.
std::string agree(const rt::TensorView& a, const TensorData& b) {
  if (a.dtype != DType::BFloat16 || b.dtype != DType::BFloat16 || a.dims != b.dims)
    return testing::compare_tensors(a, b);
  for (int64_t i = 0, n = b.numel(); i < n; ++i) {
    const double x = testing::element_as_double(a.dtype, a.data, i);
    const double y = testing::element_as_double(b.dtype, b.bytes.data(), i);
    if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
    if (!(std::fabs(x - y) <= 1e-7 + 0.015625 * std::fabs(y)))
      return "element " + std::to_string(i) + ": " + std::to_string(x) + " vs " + std::to_string(y);
  }
  return "";
}

TEST(ConformanceWheel, FusedAndUnfusedAgree) {
  const fs::path root = cases_root();
  ASSERT_TRUE(fs::is_directory(root)) << root << " is missing: run tests/onnx_wheel/make_cases.sh BUILD_DIR";
  int compared = 0;
  std::vector<std::string> disagree;
  for (const auto& e : fs::directory_iterator(root)) {
    const fs::path model = e.path() / "model.onnx";
    if (!fs::exists(model)) continue;
    onnx::ModelProto proto;
    {
      std::ifstream in(model, std::ios::binary);
      if (!in || !proto.ParseFromIstream(&in) || !excluded(proto).empty()) continue;
    }
    std::vector<std::shared_ptr<TensorData>> outs[2];
    bool ran = true;
    for (int unfused = 0; unfused < 2 && ran; ++unfused) {
      try {
        Model m = frontend::import_onnx_file(model.string());
        verify_model(m);
        ran = conformance::run_case(e.path(), m, {unfused == 1}, &outs[unfused]).empty();
      } catch (const std::exception&) {
        ran = false;
      }
    }
    if (!ran) continue;
    ++compared;
    const std::string label = e.path().filename().string();
    if (outs[0].size() != outs[1].size()) {
      disagree.push_back(label + ": output counts differ");
      continue;
    }
    for (size_t i = 0; i < outs[0].size(); ++i) {
      rt::TensorView view;
      view.dtype = outs[0][i]->dtype;
      view.dims = outs[0][i]->dims;
      view.data = outs[0][i]->bytes.data();
      if (std::string diff = agree(view, *outs[1][i]); !diff.empty()) {
        disagree.push_back(label + " output " + std::to_string(i) + ": " + diff);
        break;
      }
    }
  }
  std::printf("[conformance-wheel] fused vs unfused: %d cases compared, %zu disagree\n", compared, disagree.size());
  EXPECT_GT(compared, 1400);
  for (const std::string& d : disagree) ADD_FAILURE() << d;
}

}  // namespace
}  // namespace cuvil
