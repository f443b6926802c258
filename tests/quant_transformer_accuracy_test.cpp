// W8A8 accuracy on a transformer (issue 11, "What it must show"): the tiny digits transformer
// of testdata/quant/transformer (written by testdata/quant/make_transformer_classifier.py: each
// 8x8 digit is 8 row tokens, two pre-norm encoder layers, mean pool, a linear head) is compiled
// by the real cuvilc, fp32 and with `--quantize w8a8 --calib` for each calibration method, and
// run on its 397 held-out digits on every CPU path this machine has; int8 may lose at most one
// point of accuracy. The package must run its products on int8 kernels (`inspect --disasm`
// shows QLinearMatMul/MatMulInteger: qdq-to-int8 applied), or the check would only measure
// fake quantization. The digits CNN's version of this check is in quant_qdq_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/npy.h"
#include "options/quantize_options.h"
#include "run_tool.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::run_tool;
using test::TempDir;

size_t count_of(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// The int8 products the program calls: its `CallOp nK  ; MatMulInteger "name"` lines (not the
// node table or the pass log, which name the ops too).
size_t int8_calls(const std::string& disasm) {
  return count_of(disasm, "; MatMulInteger \"") + count_of(disasm, "; QLinearMatMul \"");
}

struct HeldOut {
  int64_t n = 0;
  std::vector<float> rows;  // [n, 8, 8], pixels / 16
  std::vector<uint8_t> labels;
};

HeldOut held_out(const std::string& dir) {
  HeldOut h;
  tools::HostTensor px, labels;
  EXPECT_EQ(tools::read_npy(dir + "/heldout_rows.npy", &px), "");
  EXPECT_EQ(tools::read_npy(dir + "/heldout_labels.npy", &labels), "");
  EXPECT_EQ(px.dims.size(), 2u);
  if (px.dims.size() != 2 || px.dims[1] != 64 || labels.bytes.size() != static_cast<size_t>(px.dims[0])) {
    ADD_FAILURE() << "held-out set: expected uint8 [n, 64] rows and [n] labels";
    return h;
  }
  h.n = px.dims[0];
  h.rows.resize(px.bytes.size());
  for (size_t i = 0; i < h.rows.size(); ++i) h.rows[i] = px.bytes[i] / 16.0f;
  h.labels.assign(labels.bytes.begin(), labels.bytes.end());
  return h;
}

// Percent of the held-out digits whose largest logit is the label, on the active CPU path.
double accuracy(const std::string& package_file, const HeldOut& h) {
  const std::string bytes = test::read_bytes(package_file);
  auto pkg = test::load(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  if (!pkg) return -1;
  auto s = test::open_session(pkg.get());
  EXPECT_TRUE(test::Ok(test::set_f32(s.get(), "rows", {h.n, 8, 8}, h.rows)));
  EXPECT_TRUE(test::Ok(cuvil_session_run(s.get())));
  std::vector<int64_t> dims;
  const std::vector<float> logits = test::output<float>(s.get(), 0, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{h.n, 10}));
  if (logits.size() != static_cast<size_t>(h.n) * 10) return -1;
  int64_t right = 0;
  for (int64_t i = 0; i < h.n; ++i) {
    const float* row = logits.data() + i * 10;
    right += std::max_element(row, row + 10) - row == h.labels[static_cast<size_t>(i)];
  }
  return 100.0 * static_cast<double>(right) / static_cast<double>(h.n);
}

// 2 layers x (q, k, v, o, fc1, fc2 and the two activation products q k^T, p v) + the embedding
// = 17 MatMuls, and the head's Gemm.
constexpr size_t kProducts = 18;

TEST(QuantAccuracy, TransformerLosesAtMostOnePointWithEachMethod) {
  const std::string dir = std::string(CUVIL_SOURCE_DIR) + "/testdata/quant/transformer";
  const HeldOut h = held_out(dir);
  ASSERT_GT(h.n, 0);
  TempDir tmp;
  const std::string fp32_pkg = tmp.file("fp32.cuvir");
  const RunResult cf = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", dir + "/classifier.onnx", "-o", fp32_pkg});
  ASSERT_EQ(cf.exit_code, 0) << cf.err;
  const RunResult df = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", fp32_pkg, "--disasm"});
  ASSERT_EQ(df.exit_code, 0) << df.err;
  EXPECT_EQ(int8_calls(df.out), 0u) << df.out;

  const rt::CpuPath before = rt::active_cpu_path();
  std::vector<double> fp32;  // per supported path
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    fp32.push_back(accuracy(fp32_pkg, h));
    EXPECT_GE(fp32.back(), 90.0) << rt::cpu_path_name(path);
  }
  for (const std::string& method : calibration_method_names()) {
    SCOPED_TRACE(method);
    const std::string pkg = tmp.file(method + ".cuvir");
    const RunResult c = run_tool(tmp.path(), CUVIL_CUVILC,
                                 {"compile", dir + "/classifier.onnx", "-o", pkg, "--quantize", "w8a8", "--calib",
                                  dir + "/calib", "--calibration-method", method});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    // Every product was quantized (the report's lines on stderr) and none fell back.
    EXPECT_EQ(count_of(c.err, "quantized MatMul '") + count_of(c.err, "quantized Gemm '"), kProducts) << c.err;
    const RunResult d = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", pkg, "--disasm"});
    ASSERT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(int8_calls(d.out), kProducts) << d.out;
    size_t i = 0;
    for (rt::CpuPath path : rt::supported_cpu_paths()) {
      ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
      const double int8 = accuracy(pkg, h);
      std::printf("transformer %-10s %-8s fp32 %.2f%%  w8a8 %.2f%%\n", method.c_str(), rt::cpu_path_name(path),
                  fp32[i], int8);
      EXPECT_LE(fp32[i] - int8, 1.0) << rt::cpu_path_name(path) << "\n" << c.err;
      ++i;
    }
  }
  rt::set_cpu_path_for_testing(before);
}

}  // namespace
}  // namespace cuvil
