// ONNX Runtime quantize_static QDQ models through cuvil (suite QdqImport): the models and ORT's
// outputs in testdata/models/qdq_*.{onnx,npy} (testdata/scripts/make_qdq_models.py: QDQ,
// per-channel int8 weights, uint8 activations, MinMax) are compiled with the real cuvilc and
// run with the real cuvil-run; at least 99% of the output elements must lie within one
// quantisation step (the scale of the output's last QuantizeLinear) of ORT's, and
// `cuvilc inspect --disasm` must show the int8 kernels the qdq-to-int8 pass put there, on
// every kernel path (CUVIL_CPU_PATH); the same within one step of the model compiled with
// `--skip-pass qdq-to-int8` (the float QDQ graph), whose disassembly has no int8 products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "onnx_builder.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::run_tool;
using test::TempDir;

// The float32 elements of a .npy file (format 1.0, little-endian, C order).
std::vector<float> npy_floats(const std::string& path) {
  const std::string f = test::read_bytes(path);
  if (f.size() < 10 || f.compare(0, 6, "\x93NUMPY") != 0 || f[6] != 1) {
    ADD_FAILURE() << path << " is not a .npy 1.0 file";
    return {};
  }
  const size_t len = static_cast<uint8_t>(f[8]) | (static_cast<size_t>(static_cast<uint8_t>(f[9])) << 8);
  const std::string header = f.substr(10, len);
  if (header.find("'<f4'") == std::string::npos) {
    ADD_FAILURE() << path << " is not float32: " << header;
    return {};
  }
  std::vector<float> v((f.size() - 10 - len) / 4);
  std::memcpy(v.data(), f.data() + 10 + len, v.size() * 4);
  return v;
}

size_t count_of(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

struct QdqModel {
  const char* name;
  const char* output;
  const char* int8_op;
  size_t int8_ops;  // at least this many int8_op in the disassembly
};

void check(const QdqModel& m, const char* cpu_path) {
  SCOPED_TRACE(std::string(m.name) + " on " + cpu_path);
  const std::string dir = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/";
  const std::string base = dir + "qdq_" + m.name;
  TempDir tmp;
  const std::string pkg = tmp.file("m.cuvir");
  RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", base + ".onnx", "-o", pkg});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult d = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", pkg, "--disasm"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_GE(count_of(d.out, m.int8_op), m.int8_ops) << d.out;

  // The same model with the pass skipped: DequantizeLinear, float products, QuantizeLinear.
  const std::string float_pkg = tmp.file("float.cuvir");
  RunResult cf = run_tool(tmp.path(), CUVIL_CUVILC,
                          {"compile", base + ".onnx", "-o", float_pkg, "--skip-pass", "qdq-to-int8"});
  ASSERT_EQ(cf.exit_code, 0) << cf.err;
  RunResult df = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", float_pkg, "--disasm"});
  EXPECT_EQ(count_of(df.out, m.int8_op), 0u) << df.out;

  const std::string out_dir = tmp.file("out");
  RunResult r = run_tool(tmp.path(), CUVIL_RUN,
                         {pkg, "--input", std::string("input=") + base + "_input.npy", "--output-dir", out_dir},
                         std::string("env CUVIL_CPU_PATH=") + cpu_path + " ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string float_dir = tmp.file("float_out");
  RunResult rf = run_tool(tmp.path(), CUVIL_RUN,
                          {float_pkg, "--input", std::string("input=") + base + "_input.npy", "--output-dir", float_dir},
                          std::string("env CUVIL_CPU_PATH=") + cpu_path + " ");
  ASSERT_EQ(rf.exit_code, 0) << rf.err;
  const std::vector<float> got = npy_floats(out_dir + "/" + m.output + ".npy");
  const std::vector<float> float_qdq = npy_floats(float_dir + "/" + m.output + ".npy");
  const std::vector<float> want = npy_floats(base + "_output.npy");
  const std::vector<float> step = npy_floats(base + "_step.npy");
  ASSERT_EQ(step.size(), 1u);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(float_qdq.size(), want.size());
  size_t within = 0, within_float = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    within += diff <= step[0] * 1.0001;
    within_float += std::fabs(static_cast<double>(got[i]) - float_qdq[i]) <= step[0] * 1.0001;
    worst = std::max(worst, diff);
  }
  EXPECT_GE(within * 100, want.size() * 99)
      << within << " of " << want.size() << " elements within one step " << step[0] << " of ORT; worst "
      << worst;
  EXPECT_GE(within_float * 100, want.size() * 99)
      << within_float << " of " << want.size() << " elements within one step of the float QDQ graph";
  // The test can fail: ORT's output is not all zeros, a constant output would not match it.
  double spread = 0;
  for (float w : want) spread = std::max(spread, std::fabs(static_cast<double>(w) - want[0]));
  EXPECT_GT(spread, 4 * step[0]);
}

const QdqModel kConvNet{"conv_net", "logits", "QLinearConv", 3};
const QdqModel kMlp{"mlp", "output", "QLinearMatMul", 2};
// Five products: the three projections and the two of two activations (q k^T, p v).
const QdqModel kAttention{"attention", "output", "QLinearMatMul", 5};

TEST(QdqImport, ConvNetMatchesOrtOnEveryPath) {
  for (const char* path : {"portable", "avx2", "avx512"}) check(kConvNet, path);
}

TEST(QdqImport, MlpMatchesOrtOnEveryPath) {
  for (const char* path : {"portable", "avx2", "avx512"}) check(kMlp, path);
}

TEST(QdqImport, AttentionMatchesOrtOnEveryPath) {
  for (const char* path : {"portable", "avx2", "avx512"}) check(kAttention, path);
}

TEST(QdqImport, GemmWithBiasBecomesMatMulInteger) {
  const std::string dir = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/";
  TempDir tmp;
  const std::string pkg = tmp.file("m.cuvir");
  RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", dir + "qdq_conv_net.onnx", "-o", pkg});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult d = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", pkg, "--disasm"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_GE(count_of(d.out, "MatMulInteger"), 1u) << d.out;
  EXPECT_EQ(count_of(d.out, "Gemm"), 0u) << d.out;
}

// cuvil's own QDQ form (`compile --quantize w8a8`) of Conv(+ bias shared through an Identity,
// as PyTorch's ResNet exports have it) -> Relu -> Conv: the quantizer puts the Relu's output,
// range from 0, behind a QuantizeLinear with zero point 0, which qdq-to-int8 absorbs into a
// QLinearConv; the second Conv (float output) becomes ConvInteger with its bias. Both must
// run on int8 kernels (before the Identity fix neither did) and agree with the float QDQ graph
// (--skip-pass qdq-to-int8).
TEST(QdqImport, CuvilQdqConvReluConvRunsOnInt8Kernels) {
  onnx::ModelProto m = test::make_model(13);
  onnx::GraphProto* g = m.mutable_graph();
  test::add_input(g, "image", onnx::TensorProto::FLOAT, {"batch", 1, 8, 8});
  test::add_output(g, "out", onnx::TensorProto::FLOAT, {"batch", 3, 3, 3});
  std::vector<float> w1(4 * 1 * 3 * 3), b1(4), w2(3 * 4 * 3 * 3), b2(3);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.3f * std::sin(1.7f * static_cast<float>(i) + 0.4f);
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.2f * std::cos(0.9f * static_cast<float>(i) + 0.1f);
  for (size_t i = 0; i < b1.size(); ++i) b1[i] = 0.1f * static_cast<float>(i) - 0.15f;
  for (size_t i = 0; i < b2.size(); ++i) b2[i] = 0.05f * static_cast<float>(i);
  *g->add_initializer() = test::make_float_tensor("w1", {4, 1, 3, 3}, w1);
  *g->add_initializer() = test::make_float_tensor("b1", {4}, b1);
  *g->add_initializer() = test::make_float_tensor("w2", {3, 4, 3, 3}, w2);
  *g->add_initializer() = test::make_float_tensor("b2", {3}, b2);
  test::add_node(g, "Identity", {"b1"}, {"b1_shared"}, "shared_bias");
  test::set_attr_ints(test::add_node(g, "Conv", {"image", "w1", "b1_shared"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  test::add_node(g, "Relu", {"c1"}, {"r1"}, "relu1");
  test::set_attr_ints(test::add_node(g, "Conv", {"r1", "w2", "b2"}, {"out"}, "conv2"), "strides", {2, 2});
  TempDir tmp;
  const std::string model = test::write_model(tmp.path(), m);
  const std::string calib = std::string(CUVIL_SOURCE_DIR) + "/testdata/quant/digits/calib";
  const std::string pkg = tmp.file("int8.cuvir"), float_pkg = tmp.file("float.cuvir");
  RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "--quantize", "w8a8", "--calib", calib, "-o", pkg});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult cf = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "--quantize", "w8a8", "--calib", calib, "-o",
                                                      float_pkg, "--skip-pass", "qdq-to-int8"});
  ASSERT_EQ(cf.exit_code, 0) << cf.err;
  RunResult d = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", pkg, "--disasm"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("1 QLinearMatMul/QLinearConv, 1 MatMulInteger/ConvInteger"), std::string::npos) << d.out;
  EXPECT_GE(count_of(d.out, "QLinearConv"), 1u) << d.out;
  EXPECT_GE(count_of(d.out, "ConvInteger"), 1u) << d.out;
  EXPECT_EQ(count_of(d.out, "Relu"), 0u) << d.out;
  for (const char* path : {"portable", "avx2", "avx512"}) {
    SCOPED_TRACE(path);
    const std::string env = std::string("env CUVIL_CPU_PATH=") + path + " ";
    const std::string out = tmp.file(std::string("out_") + path), fout = tmp.file(std::string("fout_") + path);
    RunResult r = run_tool(tmp.path(), CUVIL_RUN, {pkg, "--input", "image=" + calib + "/image.npy", "--output-dir", out}, env);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    RunResult rf = run_tool(tmp.path(), CUVIL_RUN,
                            {float_pkg, "--input", "image=" + calib + "/image.npy", "--output-dir", fout}, env);
    ASSERT_EQ(rf.exit_code, 0) << rf.err;
    const std::vector<float> got = npy_floats(out + "/out.npy"), want = npy_floats(fout + "/out.npy");
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), 128u * 3 * 3 * 3);
    // The two differ only where one multiply's float rounding moves conv1's uint8 output by a
    // step: then conv2's output moves by at most step * sum|w2| over one output's window.
    double peak = 0, dot = 0, gg = 0, ww = 0;
    size_t close = 0;
    for (float w : want) peak = std::max(peak, std::fabs(static_cast<double>(w)));
    for (size_t i = 0; i < got.size(); ++i) {
      close += std::fabs(static_cast<double>(got[i]) - want[i]) <= 0.01 * peak;
      dot += static_cast<double>(got[i]) * want[i];
      gg += static_cast<double>(got[i]) * got[i];
      ww += static_cast<double>(want[i]) * want[i];
    }
    EXPECT_GT(peak, 0.1);
    EXPECT_GE(close * 100, got.size() * 99) << close << " of " << got.size();
    EXPECT_GT(dot / std::sqrt(gg * ww), 0.9999);
  }
}

}  // namespace
}  // namespace cuvil
