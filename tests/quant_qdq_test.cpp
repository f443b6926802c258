// W8A8 QDQ export (quant/quantize.h): the QDQ graph's form (what ONNX Runtime's quantize_static
// writes), per-node overrides, the SQNR fallback, the error report's three forms, that the
// exported model runs in ONNX Runtime (skipped without one), and the digits CNN's accuracy
// with each calibration method.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "cli/npy.h"
#include "onnx_builder.h"
#include "quant/quant_report.h"
#include "quant/quantize.h"
#include "run_tool.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::TempDir;

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, sd);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// x [batch, 4] -> MatMul "mm" (W1 [4, 8]) -> Relu -> Gemm "fc" (W2 [6, 8], transB, bias [6]) -> y
onnx::ModelProto mlp(int64_t opset = 17) {
  onnx::ModelProto m = test::make_model(opset);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", onnx::TensorProto::FLOAT, {"batch", 4});
  test::add_output(g, "y", onnx::TensorProto::FLOAT, {"batch", 6});
  *g->add_initializer() = test::make_float_tensor("W1", {4, 8}, randn(32, 1, 0.5f));
  *g->add_initializer() = test::make_float_tensor("W2", {6, 8}, randn(48, 2, 0.3f));
  *g->add_initializer() = test::make_float_tensor("B2", {6}, randn(6, 3, 0.1f));
  test::add_node(g, "MatMul", {"x", "W1"}, {"h"}, "mm");
  test::add_node(g, "Relu", {"h"}, {"r"}, "relu");
  auto* fc = test::add_node(g, "Gemm", {"r", "W2", "B2"}, {"y"}, "fc");
  test::set_attr_int(fc, "transB", 1);
  return m;
}

// 32 samples of batch 2 in DIR/x.npy.
void write_calib(const std::string& dir, const std::string& name = "x", std::vector<int64_t> dims = {32, 2, 4}) {
  tools::HostTensor t;
  t.dtype = 1;
  t.dims = dims;
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  const std::vector<float> v = randn(n, 7);
  t.bytes.resize(n * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  ASSERT_EQ(tools::write_npy(dir + "/" + name + ".npy", t), "");
}

quant::QuantizeResult quantize(const onnx::ModelProto& m, const std::string& calib, QuantizeOptions o = {}) {
  o.calib_dir = calib;
  quant::QuantizeRequest req;
  req.options = o;
  return quant::quantize_model(m, req);
}

const onnx::NodeProto* producer(const onnx::GraphProto& g, const std::string& out) {
  for (const auto& n : g.node())
    for (const auto& o : n.output())
      if (o == out) return &n;
  return nullptr;
}
const onnx::NodeProto* node_named(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& n : g.node())
    if (n.name() == name) return &n;
  return nullptr;
}
const onnx::TensorProto* init(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& t : g.initializer())
    if (t.name() == name) return &t;
  return nullptr;
}
int64_t axis_of(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.name() == "axis") return a.i();
  return -99;
}
int count_op(const onnx::GraphProto& g, const std::string& op) {
  return static_cast<int>(std::count_if(g.node().begin(), g.node().end(), [&](const auto& n) { return n.op_type() == op; }));
}

// Runs `m` on x [rows, 4] and returns output 0.
std::vector<float> run(const onnx::ModelProto& m, const std::vector<float>& x, int64_t rows, int64_t cols) {
  auto model = test::load(test::compile(m));
  auto s = test::open_session(model.get());
  EXPECT_TRUE(test::Ok(test::set_f32(s.get(), "x", {rows, cols}, x)));
  EXPECT_TRUE(test::Ok(cuvil_session_run(s.get())));
  return test::output<float>(s.get(), 0);
}

TEST(QuantQdq, MlpHasTheQuantizeStaticForm) {
  TempDir d;
  write_calib(d.path());
  const quant::QuantizeResult r = quantize(mlp(), d.path());
  const onnx::GraphProto& g = r.qdq.graph();
  EXPECT_EQ(r.samples, 32u);
  // Activations: x and the Relu output, each one QuantizeLinear + DequantizeLinear (u8).
  EXPECT_EQ(count_op(g, "QuantizeLinear"), 2);
  EXPECT_EQ(count_op(g, "DequantizeLinear"), 2 + 2 + 1);  // activations, weights, bias
  const onnx::NodeProto* mm = node_named(g, "mm");
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->input(0), "x_DequantizeLinear_Output");
  EXPECT_EQ(mm->input(1), "W1_DequantizeLinear_Output");
  ASSERT_TRUE(init(g, "x_zero_point"));
  EXPECT_EQ(init(g, "x_zero_point")->data_type(), onnx::TensorProto::UINT8);
  // Weights: s8, per output channel (MatMul [K, N]: axis 1; Gemm transB [N, K]: axis 0).
  ASSERT_TRUE(init(g, "W1_quantized"));
  EXPECT_EQ(init(g, "W1_quantized")->data_type(), onnx::TensorProto::INT8);
  EXPECT_EQ(init(g, "W1_scale")->dims_size(), 1);
  EXPECT_EQ(init(g, "W1_scale")->dims(0), 8);
  EXPECT_EQ(axis_of(*producer(g, "W1_DequantizeLinear_Output")), 1);
  EXPECT_EQ(axis_of(*producer(g, "W2_DequantizeLinear_Output")), 0);
  EXPECT_EQ(init(g, "W2_scale")->dims(0), 6);
  EXPECT_FALSE(init(g, "W1")) << "the float weight is dropped";
  // Bias: int32, scale x_scale * w_scale per channel.
  ASSERT_TRUE(init(g, "B2_quantized"));
  EXPECT_EQ(init(g, "B2_quantized")->data_type(), onnx::TensorProto::INT32);
  EXPECT_EQ(node_named(g, "fc")->input(2), "B2_DequantizeLinear_Output");
  // The report: both layers, little error.
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].node, "mm");
  EXPECT_EQ(r.layers[1].node, "fc");
  for (const auto& e : r.layers) {
    EXPECT_GT(e.sqnr_db, 25.0) << e.node;
    EXPECT_GT(e.cosine, 0.995) << e.node;
    EXPECT_LT(e.rel_l2, 0.06) << e.node;
  }
  // The QDQ model computes nearly what the float model does.
  const std::vector<float> x = randn(8 * 4, 99);
  const std::vector<float> f = run(mlp(), x, 8, 4), q = run(r.qdq, x, 8, 4);
  ASSERT_EQ(f.size(), q.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    num += (f[i] - q[i]) * (f[i] - q[i]);
    den += f[i] * f[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.06);
  EXPECT_GT(std::sqrt(num / den), 0.0) << "the QDQ model must actually quantize";
}

TEST(QuantQdq, ExcludedNodeStaysFloatAndIsListed) {
  TempDir d;
  write_calib(d.path());
  QuantizeOptions o;
  o.nodes.push_back({"fc", true, std::nullopt, std::nullopt});
  const quant::QuantizeResult r = quantize(mlp(), d.path(), o);
  EXPECT_EQ(node_named(r.qdq.graph(), "fc")->input(1), "W2");
  EXPECT_EQ(count_op(r.qdq.graph(), "QuantizeLinear"), 1);
  ASSERT_EQ(r.not_quantized.size(), 1u);
  EXPECT_EQ(r.not_quantized[0].first, "fc");
  EXPECT_NE(r.not_quantized[0].second.find("excluded"), std::string::npos);
  EXPECT_NE(quant::quant_report_text(r).find("float32   'fc': excluded by the config"), std::string::npos)
      << quant::quant_report_text(r);
}

TEST(QuantQdq, LayersUnderTheSqnrThresholdFallBackWithTheirError) {
  TempDir d;
  write_calib(d.path());
  QuantizeOptions o;
  o.fallback_sqnr_db = 150;  // above any real int8 layer
  const quant::QuantizeResult r = quantize(mlp(), d.path(), o);
  EXPECT_TRUE(r.layers.empty());
  ASSERT_EQ(r.fallbacks.size(), 2u);
  EXPECT_GT(r.fallbacks[0].sqnr_db, 10.0);
  EXPECT_LT(r.fallbacks[0].sqnr_db, 150.0);
  EXPECT_EQ(count_op(r.qdq.graph(), "QuantizeLinear"), 0);
  EXPECT_EQ(node_named(r.qdq.graph(), "mm")->input(1), "W1");
  EXPECT_NE(quant::quant_report_text(r).find("fallback  MatMul 'mm': SQNR"), std::string::npos);
}

TEST(QuantQdq, PerTensorWeightsAndSymmetricActivations) {
  TempDir d;
  write_calib(d.path());
  QuantizeOptions o;
  o.granularity = WeightGranularity::kPerTensor;
  o.symmetric_activations = true;
  const quant::QuantizeResult r = quantize(mlp(), d.path(), o);
  const onnx::GraphProto& g = r.qdq.graph();
  EXPECT_EQ(init(g, "W1_scale")->dims_size(), 0);
  EXPECT_EQ(axis_of(*producer(g, "W1_DequantizeLinear_Output")), -99);
  EXPECT_EQ(init(g, "x_zero_point")->data_type(), onnx::TensorProto::INT8);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_GT(r.layers[1].sqnr_db, 20.0);
}

TEST(QuantQdq, OpsetsBelow13GetPerTensorScales) {
  TempDir d;
  write_calib(d.path());
  const quant::QuantizeResult r = quantize(mlp(12), d.path());
  const onnx::GraphProto& g = r.qdq.graph();
  EXPECT_EQ(init(g, "W2_scale")->dims_size(), 0);
  EXPECT_EQ(axis_of(*producer(g, "W2_DequantizeLinear_Output")), -99);
  EXPECT_EQ(init(g, "B2_quantized_scale")->dims_size(), 0);
  EXPECT_EQ(axis_of(*producer(g, "B2_DequantizeLinear_Output")), -99);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_GT(r.layers[1].sqnr_db, 20.0);
}

// A float16 layer stays as it is, listed with why; the float32 layer next to it is quantized.
TEST(QuantQdq, LayerThatCannotBeQuantizedIsListedNotAnError) {
  onnx::ModelProto m = mlp();
  auto* g = m.mutable_graph();
  std::vector<uint16_t> half(4 * 4, 0x3c00);  // 1.0 in float16
  *g->add_initializer() = test::make_raw_tensor("W16", onnx::TensorProto::FLOAT16, {4, 4}, test::raw_of(half));
  auto* cast = test::add_node(g, "Cast", {"x"}, {"x16"}, "to16");
  test::set_attr_int(cast, "to", onnx::TensorProto::FLOAT16);
  test::add_node(g, "MatMul", {"x16", "W16"}, {"h16"}, "mm16");
  test::add_output(g, "h16", onnx::TensorProto::FLOAT16, {"batch", 4});
  TempDir d;
  write_calib(d.path());
  const quant::QuantizeResult r = quantize(m, d.path());
  ASSERT_EQ(r.not_quantized.size(), 1u);
  EXPECT_EQ(r.not_quantized[0].first, "mm16");
  EXPECT_EQ(r.not_quantized[0].second, "weight 'W16' is not float32");
  EXPECT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(node_named(r.qdq.graph(), "mm16")->input(1), "W16");
}

// Calibration runs on the portable kernel path whatever path is active, and puts the active
// path back: the exported model is byte-identical from every path this CPU has.
TEST(QuantQdq, ScalesDoNotDependOnTheKernelPath) {
  TempDir d;
  write_calib(d.path());
  const rt::CpuPath before = rt::active_cpu_path();
  std::string first;
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    QuantizeOptions o;
    o.method = CalibrationMethod::kEntropy;  // histograms too
    const quant::QuantizeResult r = quantize(mlp(), d.path(), o);
    EXPECT_EQ(rt::active_cpu_path(), path) << "the caller's path is restored";
    std::string bytes;
    ASSERT_TRUE(r.qdq.SerializeToString(&bytes));
    if (first.empty()) first = bytes;
    EXPECT_EQ(bytes, first) << rt::cpu_path_name(path);
  }
  rt::set_cpu_path_for_testing(before);
}

TEST(QuantQdq, PerNodeMethodOverride) {
  TempDir d;
  write_calib(d.path());
  QuantizeOptions o;
  o.percentile = 50;  // a deliberately bad percentile, only for "mm"
  o.nodes.push_back({"mm", false, CalibrationMethod::kPercentile, std::nullopt});
  const quant::QuantizeResult plain = quantize(mlp(), d.path());
  const quant::QuantizeResult r = quantize(mlp(), d.path(), o);
  // x's range is clipped for mm only: its scale shrinks, and mm's error grows.
  float s_plain, s_clip;
  std::memcpy(&s_plain, init(plain.qdq.graph(), "x_scale")->raw_data().data(), 4);
  std::memcpy(&s_clip, init(r.qdq.graph(), "x_scale")->raw_data().data(), 4);
  EXPECT_LT(s_clip, s_plain * 0.6f);
  EXPECT_LT(r.layers[0].sqnr_db, plain.layers[0].sqnr_db);
}

TEST(QuantQdq, ReportAsTextJsonAndSvg) {
  TempDir d;
  write_calib(d.path());
  const quant::QuantizeResult r = quantize(mlp(), d.path());
  const std::string text = quant::quant_report_text(r);
  EXPECT_NE(text.find("quantization: w8a8, minmax calibration over 32 samples; 2 layers int8, 0 float32"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("quantized MatMul 'mm': SQNR"), std::string::npos) << text;
  const std::string json = quant::quant_report_json(r);
  for (const char* key : {"\"scheme\": \"w8a8\"", "\"method\": \"minmax\"", "\"node\": \"fc\"", "\"sqnr_db\": ",
                          "\"cosine\": ", "\"rel_l2\": ", "\"fallbacks\": []"})
    EXPECT_NE(json.find(key), std::string::npos) << key << "\n" << json;
  const std::string svg = quant::quant_report_svg(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  for (const char* s : {"Gemm fc", "MatMul mm", "SQNR (dB)", "cosine", "rel L2", "colour scale", "</svg>"})
    EXPECT_NE(svg.find(s), std::string::npos) << s;
}

TEST(QuantQdq, CalibrationDataMustFitTheModel) {
  TempDir d;
  write_calib(d.path(), "x", {32, 2, 5});
  EXPECT_TRUE(test::FailsWith([&] { quantize(mlp(), d.path()); }, ExitCode::kUsage,
                              {"model input 'x'", "expected a leading sample axis before f32 [?, 4]", "got f32 [32, 2, 5]"}));
}

// The exported model loads and runs in ONNX Runtime and agrees with cuvil's run of it. Needs a
// Python with onnxruntime and numpy: $CUVIL_ORT_PYTHON, else python3; skipped without one.
TEST(QuantQdq, ExportRunsInOnnxRuntime) {
  const char* env = std::getenv("CUVIL_ORT_PYTHON");
  const std::string py = env && *env ? env : "python3";
  if (std::system((test::shell_quote(py) + " -c 'import onnxruntime, numpy' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "no onnxruntime in " << py << " (set CUVIL_ORT_PYTHON)";
  TempDir d;
  write_calib(d.path());
  const quant::QuantizeResult r = quantize(mlp(), d.path());
  test::write_model(d.path(), r.qdq, "qdq.onnx");
  test::write_model(d.path(), mlp(), "float.onnx");
  const std::vector<float> x = randn(16 * 4, 5);
  const std::vector<float> q = run(r.qdq, x, 16, 4);
  tools::HostTensor tx{1, {16, 4}, {}}, tq{1, {16, 6}, {}};
  tx.bytes.resize(x.size() * 4);
  std::memcpy(tx.bytes.data(), x.data(), tx.bytes.size());
  tq.bytes.resize(q.size() * 4);
  std::memcpy(tq.bytes.data(), q.data(), tq.bytes.size());
  ASSERT_EQ(tools::write_npy(d.file("in.npy"), tx), "");
  ASSERT_EQ(tools::write_npy(d.file("cuvil_out.npy"), tq), "");
  const test::RunResult res = test::run_tool(
      d.path(), py, {std::string(CUVIL_SOURCE_DIR) + "/testdata/quant/ort_check.py", d.file("qdq.onnx"),
                     d.file("float.onnx"), d.file("in.npy"), d.file("cuvil_out.npy")});
  EXPECT_EQ(res.exit_code, 0) << res.out << res.err;
  EXPECT_NE(res.out.find("ok"), std::string::npos) << res.out << res.err;
}

// ---- accuracy: the digits CNN (examples/digits) with each calibration method --------------

TEST(QuantAccuracy, DigitsLosesAtMostHalfAPointWithEachMethod) {
  const std::string root = CUVIL_SOURCE_DIR;
  const onnx::ModelProto model = quant::read_model_proto(root + "/examples/digits/digits.onnx");
  tools::HostTensor px, labels;
  ASSERT_EQ(tools::read_npy(root + "/testdata/quant/digits/eval_pixels.npy", &px), "");
  ASSERT_EQ(tools::read_npy(root + "/testdata/quant/digits/eval_labels.npy", &labels), "");
  const int64_t n = px.dims[0];
  std::vector<float> images(px.bytes.size());
  for (size_t i = 0; i < images.size(); ++i) images[i] = px.bytes[i] / 16.0f;
  auto accuracy = [&](const onnx::ModelProto& m) {
    auto pkg = test::load(test::compile(m));
    auto s = test::open_session(pkg.get());
    EXPECT_TRUE(test::Ok(test::set_f32(s.get(), "image", {n, 1, 8, 8}, images)));
    EXPECT_TRUE(test::Ok(cuvil_session_run(s.get())));
    const std::vector<float> logits = test::output<float>(s.get(), 0);
    int64_t right = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = logits.data() + i * 10;
      right += std::max_element(row, row + 10) - row == labels.bytes[i];
    }
    return 100.0 * static_cast<double>(right) / static_cast<double>(n);
  };
  const double fp32 = accuracy(model);
  EXPECT_GT(fp32, 99.0);
  for (const std::string& method : calibration_method_names()) {
    QuantizeOptions o;
    o.method = *parse_calibration_method(method);
    const quant::QuantizeResult r = quantize(model, root + "/testdata/quant/digits/calib", o);
    EXPECT_EQ(r.layers.size(), 4u) << method;  // 2 Conv + 2 Gemm
    const double int8 = accuracy(r.qdq);
    std::printf("digits %-10s fp32 %.2f%%  w8a8 %.2f%%\n", method.c_str(), fp32, int8);
    EXPECT_LE(fp32 - int8, 0.5) << method;
  }
}

}  // namespace
}  // namespace cuvil
