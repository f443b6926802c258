// W8A8 from the command line: `cuvilc quantize` and `cuvilc compile --quantize w8a8` on the
// digits CNN write the QDQ model, the SVG heatmap, the JSON report and the package report
// that `cuvilc inspect` prints; their usage errors; the config's `quantize:` section.
#include <gtest/gtest.h>
#include <unistd.h>

#include "onnx_builder.h"
#include "options/compile_options.h"
#include "quant/quantize.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::TempDir;

const std::string kRoot = CUVIL_SOURCE_DIR;
const std::string kDigits = kRoot + "/examples/digits/digits.onnx";
const std::string kCalib = kRoot + "/testdata/quant/digits/calib";

test::RunResult cuvilc(const TempDir& d, const std::vector<std::string>& args) {
  return test::run_tool(d.path(), CUVIL_CUVILC, args);
}

TEST(QuantCli, QuantizeWritesTheQdqModelHeatmapAndReport) {
  TempDir d;
  const auto r = cuvilc(d, {"quantize", kDigits, "--calib", kCalib, "-o", d.file("q.onnx"), "--calibration-method",
                            "percentile", "--percentile", "99.99", "--quant-report", d.file("e.svg"), "--report",
                            d.file("q.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("percentile calibration over 128 samples; 4 layers int8, 0 float32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("quantized Conv '/features/features.0/Conv': SQNR"), std::string::npos) << r.err;
  const onnx::ModelProto q = quant::read_model_proto(d.file("q.onnx"));
  int qs = 0;
  for (const auto& n : q.graph().node()) qs += n.op_type() == "QuantizeLinear";
  EXPECT_EQ(qs, 4);
  const std::string svg = test::read_bytes(d.file("e.svg"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("Conv /features/features.3/Conv"), std::string::npos);
  const std::string json = test::read_bytes(d.file("q.json"));
  EXPECT_NE(json.find("\"method\": \"percentile\""), std::string::npos) << json;
}

TEST(QuantCli, CompileQuantizedPackageCarriesTheReport) {
  TempDir d;
  const auto r = cuvilc(d, {"compile", kDigits, "--quantize", "w8a8", "--calib", kCalib, "-o", d.file("q.cuvir"),
                            "--report", d.file("r.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string json = test::read_bytes(d.file("r.json"));
  EXPECT_NE(json.find("\"quantization\": {"), std::string::npos) << json;
  EXPECT_NE(json.find("\"sqnr_db\""), std::string::npos) << json;
  const auto inspect = cuvilc(d, {"inspect", d.file("q.cuvir")});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("quantization: w8a8, minmax calibration over 128 samples"), std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("quantized Gemm '/classifier/classifier.3/Gemm': SQNR"), std::string::npos)
      << inspect.out;
}

TEST(QuantCli, EmitIrShowsTheQdqGraph) {
  TempDir d;
  const auto plain = cuvilc(d, {"compile", kDigits, "--emit", "ir"});
  const auto q = cuvilc(d, {"compile", kDigits, "--quantize", "w8a8", "--calib", kCalib, "--emit", "ir"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(plain.out.find("QuantizeLinear"), std::string::npos);
  EXPECT_NE(q.out.find("QuantizeLinear"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("DequantizeLinear"), std::string::npos);
}

TEST(QuantCli, FallbackThresholdFromTheConfigListsLayers) {
  TempDir d;
  test::write_bytes(d.file("q.yaml"), "quantize:\n  scheme: w8a8\n  calib: " + kCalib +
                                          "\n  fallback_sqnr_db: 300\n  nodes:\n    - {name: "
                                          "/features/features.0/Conv, exclude: true}\n");
  const auto r = cuvilc(d, {"compile", kDigits, "--config", d.file("q.yaml"), "-o", d.file("q.cuvir")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("0 layers int8, 4 float32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fallback  Conv '/features/features.3/Conv': SQNR"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("float32   '/features/features.0/Conv': excluded by the config"), std::string::npos) << r.err;
}

// Calibration shows a bar over the samples on a terminal (script(1)'s pseudo-terminal), with
// compile's own stages after it and the line cleared before the summary; without a terminal
// (CI logs, pipes) it prints no progress, only the summary.
TEST(QuantCli, CalibrationProgressOnlyOnATerminal) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no script(1) to make a terminal";
  TempDir d;
  const std::string compile = test::shell_quote(CUVIL_CUVILC) + " compile " + test::shell_quote(kDigits) +
                              " --quantize w8a8 --calib " + test::shell_quote(kCalib) + " -o " +
                              test::shell_quote(d.file("t.cuvir"));
  const auto t = test::run_tool(d.path(), "/usr/bin/script", {"-qec", compile, "/dev/null"});
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  EXPECT_NE(t.out.find("cuvilc: [quantize] calibration: reading " + kCalib), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[quantize] calibration: compiling the float model"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[quantize] calibration: samples [" + std::string(20, ' ') + "] 1 of 128"), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("[quantize] calibration: samples [====================] 128 of 128"), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("[quantize] error report: samples [====================] 128 of 128"), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("cuvilc: [1/4] importing"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("\r\033[Kcuvilc: wrote"), std::string::npos) << t.out;  // cleared before the summary
  // `cuvilc quantize` shows the same bar.
  const std::string quantize = test::shell_quote(CUVIL_CUVILC) + " quantize " + test::shell_quote(kDigits) +
                               " --calib " + test::shell_quote(kCalib) + " -o " + test::shell_quote(d.file("t.onnx"));
  const auto tq = test::run_tool(d.path(), "/usr/bin/script", {"-qec", quantize, "/dev/null"});
  ASSERT_EQ(tq.exit_code, 0) << tq.out << tq.err;
  EXPECT_NE(tq.out.find("[quantize] calibration: samples [====================] 128 of 128"), std::string::npos)
      << tq.out;
  EXPECT_NE(tq.out.find("\r\033[Kcuvilc: wrote"), std::string::npos) << tq.out;

  for (const auto& args : {std::vector<std::string>{"compile", kDigits, "--quantize", "w8a8", "--calib", kCalib, "-o",
                                                    d.file("p.cuvir")},
                           std::vector<std::string>{"quantize", kDigits, "--calib", kCalib, "-o", d.file("p.onnx")}}) {
    const auto plain = cuvilc(d, args);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(plain.err.find("[quantize]"), std::string::npos) << plain.err;
    EXPECT_EQ(plain.err.find("samples ["), std::string::npos) << plain.err;
    EXPECT_EQ(plain.err.find('\r'), std::string::npos) << plain.err;
    EXPECT_EQ(plain.err.find("\033["), std::string::npos) << plain.err;
    EXPECT_NE(plain.err.find("calibration over 128 samples"), std::string::npos) << plain.err;  // the summary
  }
}

TEST(QuantCli, QuantizeNeedsCalibrationData) {
  TempDir d;
  const auto r = cuvilc(d, {"compile", kDigits, "--quantize", "w8a8", "-o", d.file("q.cuvir")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("quantizing needs calibration data: give --calib DIR"), std::string::npos) << r.err;
  EXPECT_NE(::access(d.file("q.cuvir").c_str(), F_OK), 0) << "nothing is written";
}

TEST(QuantCli, QuantReportNeedsQuantize) {
  TempDir d;
  const auto r = cuvilc(d, {"compile", kDigits, "--quant-report", d.file("e.svg"), "-o", d.file("q.cuvir")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--quant-report needs --quantize w8a8"), std::string::npos) << r.err;
}

TEST(QuantCli, MissingCalibrationDirectory) {
  TempDir d;
  const auto r = cuvilc(d, {"quantize", kDigits, "--calib", d.file("none"), "-o", d.file("q.onnx")});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("--calib: '" + d.file("none") + "' is not a readable directory"), std::string::npos) << r.err;
}

TEST(QuantCli, UnknownMethodIsAUsageError) {
  TempDir d;
  const auto r = cuvilc(d, {"quantize", kDigits, "--calib", kCalib, "-o", d.file("q.onnx"), "--calibration-method", "kl"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--calibration-method"), std::string::npos) << r.err;
}

// ---- the config's quantize: section ----

std::string config_error(const std::string& text) {
  try {
    parse_config(text, "c.yaml");
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kUsage) << d.what();
    return d.what();
  }
  ADD_FAILURE() << "config accepted:\n" << text;
  return "";
}

TEST(QuantConfig, EveryKeyIsRead) {
  const CompileOptions o = parse_config(
      "quantize:\n  scheme: w8a8\n  calib: data/\n  method: ema\n  ema_alpha: 0.5\n  percentile: 99.9\n"
      "  symmetric_activations: true\n  granularity: per_tensor\n  fallback_sqnr_db: 20\n  nodes:\n"
      "    - {name: a, exclude: true}\n    - {name: b, method: entropy, granularity: per_channel}\n",
      "c.yaml");
  EXPECT_TRUE(o.quantize);
  EXPECT_EQ(o.quant.calib_dir, "data/");
  EXPECT_EQ(o.quant.method, CalibrationMethod::kEma);
  EXPECT_EQ(o.quant.ema_alpha, 0.5);
  EXPECT_EQ(o.quant.percentile, 99.9);
  EXPECT_TRUE(o.quant.symmetric_activations);
  EXPECT_EQ(o.quant.granularity, WeightGranularity::kPerTensor);
  EXPECT_EQ(o.quant.fallback_sqnr_db, 20);
  ASSERT_EQ(o.quant.nodes.size(), 2u);
  EXPECT_TRUE(o.quant.nodes[0].exclude);
  EXPECT_EQ(o.quant.nodes[1].method, CalibrationMethod::kEntropy);
  EXPECT_EQ(o.quant.nodes[1].granularity, WeightGranularity::kPerChannel);
}

TEST(QuantConfig, BadValuesNameTheKey) {
  EXPECT_EQ(config_error("quantize:\n  method: kl\n"),
            "c.yaml:2:11: quantize.method: expected minmax, ema, percentile, entropy or mse, got 'kl'");
  EXPECT_EQ(config_error("quantize:\n  scheme: w4a16\n"), "c.yaml:2:11: quantize.scheme: expected w8a8 or none, got 'w4a16'");
  EXPECT_EQ(config_error("quantize:\n  ema_alpha: 2\n"), "c.yaml:2:14: quantize.ema_alpha: must be in (0, 1], got 2");
  EXPECT_EQ(config_error("quantize:\n  percentile: 0\n"), "c.yaml:2:15: quantize.percentile: must be in (0, 100], got 0");
  EXPECT_EQ(config_error("quantize:\n  granularity: per_row\n"),
            "c.yaml:2:16: quantize.granularity: expected per_channel or per_tensor, got 'per_row'");
  EXPECT_EQ(config_error("quantize:\n  nodes:\n    - {exclude: true}\n"),
            "c.yaml:3:7: quantize.nodes[0]: a node override needs 'name' (the ONNX node name)");
  EXPECT_NE(config_error("quantize:\n  calibration: x\n").find("unknown key 'quantize.calibration'"), std::string::npos);
}

}  // namespace
}  // namespace cuvil
