// Whole models compiled with and without the linear-op fusion passes (fold-batch-norm,
// fuse-epilogues) must compute the same outputs from the same inputs (suite CliRunFused,
// rtol 1e-4, atol 1e-5): the real cuvilc and cuvil-run through the shell, as a user runs them.
// This is the exactness check of cuvil::FusedMatMul / FusedConv on real exports (ResNet-18's
// conv + residual + Relu blocks, bert_tiny's dense layers with bias, gelu and residual).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "onnx_builder.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::run_tool;
using test::TempDir;

// A .npy file (format 1.0) of little-endian C-order data.
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& dims,
               const std::string& data) {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
  if (dims.size() == 1) shape += ",";
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  test::write_bytes(path, file + header + data);
}

// The float32 values and the header of a .npy file cuvil-run wrote.
std::vector<float> read_npy_f32(const std::string& path, std::string* header) {
  const std::string f = test::read_bytes(path);
  if (f.size() < 10) return {};
  const size_t len = static_cast<uint8_t>(f[8]) | static_cast<size_t>(static_cast<uint8_t>(f[9])) << 8;
  *header = f.substr(10, len);
  std::vector<float> v((f.size() - 10 - len) / 4);
  if (!v.empty()) std::memcpy(v.data(), f.data() + 10 + len, v.size() * 4);
  return v;
}

// Compiles `model` twice (all passes; without fold-batch-norm and fuse-epilogues), runs both on
// the same inputs and compares every output. `fused_ops` must occur in the fused compile's IR.
void expect_fused_matches_unfused(const std::string& model, const std::vector<std::string>& run_args,
                                  const std::vector<std::string>& outputs,
                                  const std::vector<std::string>& fused_ops) {
  TempDir tmp;
  const std::string fused = tmp.file("fused.cuvir"), plain = tmp.file("plain.cuvir");
  RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "-o", fused});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  c = run_tool(tmp.path(), CUVIL_CUVILC,
               {"compile", model, "-o", plain, "--skip-pass", "fuse-epilogues", "--skip-pass", "fold-batch-norm"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult ir = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "--emit", "ir"});
  ASSERT_EQ(ir.exit_code, 0) << ir.err;
  for (const std::string& op : fused_ops) EXPECT_NE(ir.out.find("\"cuvil\"::" + op + "<"), std::string::npos) << op;
  // Code generation must not get slower: the fused package keeps every tile Mma kernel and
  // calls no more whole-tensor kernels.
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  RunResult df = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", fused, "--disasm"});
  RunResult dp = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", plain, "--disasm"});
  ASSERT_EQ(df.exit_code, 0) << df.err;
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  EXPECT_EQ(count(df.out, "+= Mma"), count(dp.out, "+= Mma"));
  // choose-layout's channel-moving Transposes run as whole-tensor kernels (blocked matrix
  // transposes), so they are not counted against the fused package.
  auto layout_calls = [](const std::string& text) {
    size_t n = 0;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      if (line.find("CallOp") != std::string::npos && line.find("; Transpose ") != std::string::npos &&
          (line.find("/to_nhwc\"") != std::string::npos || line.find("/to_nchw\"") != std::string::npos))
        ++n;
    return n;
  };
  EXPECT_LE(count(df.out, "CallOp") - layout_calls(df.out), count(dp.out, "CallOp"));
  for (const auto& [pkg, dir] : {std::pair{fused, tmp.file("out_fused")}, std::pair{plain, tmp.file("out_plain")}}) {
    std::vector<std::string> args = {pkg, "--output-dir", dir, "--seed", "7"};
    args.insert(args.end(), run_args.begin(), run_args.end());
    RunResult r = run_tool(tmp.path(), CUVIL_RUN, args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  for (const std::string& name : outputs) {
    std::string hf, hp;
    const std::vector<float> f = read_npy_f32(tmp.file("out_fused/" + name + ".npy"), &hf);
    const std::vector<float> p = read_npy_f32(tmp.file("out_plain/" + name + ".npy"), &hp);
    EXPECT_EQ(hf, hp) << name;
    ASSERT_EQ(f.size(), p.size()) << name;
    ASSERT_FALSE(f.empty()) << name;
    for (size_t i = 0; i < f.size(); ++i)
      ASSERT_NEAR(f[i], p[i], 1e-5 + 1e-4 * std::fabs(p[i])) << name << "[" << i << "]";
  }
}

const std::string kModels = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/";

TEST(CliRunFused, Resnet18FusedConvMatchesUnfused) {
  expect_fused_matches_unfused(kModels + "resnet18.onnx", {"--shape", "input=1x3x224x224"}, {"logits"},
                               {"FusedConv"});
}

// --layout nhwc (pass choose-layout) against the default NCHW compile on the same inputs; the IR
// must have `nhwc_nodes` NHWC nodes (convs and pools) and only the boundary Transposes
// (`transposes` of them).
void expect_nhwc_matches_nchw(const std::string& model, const std::string& shape, size_t nhwc_nodes, size_t transposes) {
  TempDir tmp;
  const std::string nhwc = tmp.file("nhwc.cuvir"), nchw = tmp.file("nchw.cuvir");
  RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "-o", nhwc, "--layout", "nhwc"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "-o", nchw});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult ir = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "--emit", "ir", "--layout", "nhwc"});
  ASSERT_EQ(ir.exit_code, 0) << ir.err;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = ir.out.find(what); at != std::string::npos; at = ir.out.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("layout = \"NHWC\""), nhwc_nodes);
  EXPECT_EQ(count("= Transpose<"), transposes);
  for (const auto& [pkg, dir] : {std::pair{nhwc, tmp.file("out_nhwc")}, std::pair{nchw, tmp.file("out_nchw")}}) {
    RunResult r = run_tool(tmp.path(), CUVIL_RUN, {pkg, "--output-dir", dir, "--seed", "7", "--shape", shape});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::string ht, hc;
  const std::vector<float> t = read_npy_f32(tmp.file("out_nhwc/logits.npy"), &ht);
  const std::vector<float> p = read_npy_f32(tmp.file("out_nchw/logits.npy"), &hc);
  EXPECT_EQ(ht, hc);
  ASSERT_EQ(t.size(), p.size());
  ASSERT_FALSE(t.empty());
  for (size_t i = 0; i < t.size(); ++i) ASSERT_NEAR(t[i], p[i], 1e-5 + 1e-4 * std::fabs(p[i])) << "logits[" << i << "]";
}

TEST(CliRunFused, Resnet18NhwcMatchesNchw) {
  // One chain from the stem conv through the MaxPool to the GlobalAveragePool (20 convs, 2
  // pools): the image in, the pooled [1, 1, 1, 512] out.
  expect_nhwc_matches_nchw(kModels + "resnet18.onnx", "input=1x3x224x224", 22, 2);
}

TEST(CliRunFused, MobilenetV2TinyNhwcMatchesNchw) {
  // Every conv is in one chain (depthwise and pointwise, residual blocks) with the
  // GlobalAveragePool at its end: one Transpose in, one out.
  expect_nhwc_matches_nchw(kModels + "mobilenet_v2_tiny.onnx", "input=1x3x96x96", 53, 2);
}

TEST(CliRunFused, BertTinyFusedMatMulMatchesUnfused) {
  // Token ids in the vocabulary, a mask with padding, both token types: the inputs cuvil-run's
  // random integers in [0, 16) cannot be (token_type_ids has 2 values).
  TempDir in;
  const int64_t batch = 2, seq = 7;
  std::vector<int64_t> ids, mask, types;
  for (int64_t i = 0; i < batch * seq; ++i) {
    ids.push_back((i * 37 + 11) % 500);
    mask.push_back(i % seq < seq - 2 * (i / seq) ? 1 : 0);
    types.push_back(i % seq >= 4 ? 1 : 0);
  }
  auto raw = [](const std::vector<int64_t>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8); };
  write_npy(in.file("ids.npy"), "<i8", {batch, seq}, raw(ids));
  write_npy(in.file("mask.npy"), "<i8", {batch, seq}, raw(mask));
  write_npy(in.file("types.npy"), "<i8", {batch, seq}, raw(types));
  expect_fused_matches_unfused(kModels + "bert_tiny.onnx",
                               {"--input", "input_ids=" + in.file("ids.npy"), "--input",
                                "attention_mask=" + in.file("mask.npy"), "--input", "token_type_ids=" + in.file("types.npy")},
                               {"last_hidden_state", "pooler_output"}, {"FusedMatMul"});
}

}  // namespace
}  // namespace cuvil
