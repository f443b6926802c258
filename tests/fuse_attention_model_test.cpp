// fuse-attention on whole models (suite FuseAttentionModels): the pass finds exactly the
// attention it should in the BERT exports (one cuvil::Attention per layer, no Softmax left) and
// in the small idiom models of testdata/passes/fuse-attention (make_cases.py), and the fused
// compile computes what the unfused one does: each model is compiled with and without
// `--skip-pass fuse-attention`, both packages run with the same inputs through cuvil-run, and
// every output agrees within rtol 1e-4, atol 1e-5.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"
#include "npy_test_util.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::run_tool;
using test::TempDir;

const std::string kSource = CUVIL_SOURCE_DIR;
const std::string kCases = kSource + "/testdata/passes/fuse-attention/";

// ---- .npy reading (writing: npy_test_util.h) ----

using test::npy_file;
using test::raw;

std::vector<float> npy_floats(const std::string& path) {
  const std::string f = test::read_bytes(path);
  if (f.size() < 10) return {};
  const size_t len = static_cast<uint8_t>(f[8]) | (static_cast<size_t>(static_cast<uint8_t>(f[9])) << 8);
  if (f.substr(10, len).find("'<f4'") == std::string::npos) return {};
  std::vector<float> v((f.size() - 10 - len) / 4);
  if (!v.empty()) std::memcpy(v.data(), f.data() + 10 + len, v.size() * 4);
  return v;
}

uint32_t g_seed = 7;
float uniform() {  // deterministic, in [-1, 1)
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>(g_seed >> 8) / static_cast<float>(1u << 23) - 1.0f;
}
std::string random_f32(int64_t n, float amplitude = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = amplitude * uniform();
  return raw(v);
}

struct Input {
  std::string name, descr;
  std::vector<int64_t> dims;
  std::string data;
};

// Ops after the whole pipeline, by "domain::op" ("" domain: plain op).
std::map<std::string, int> ops_after_passes(const std::string& path, const std::map<std::string, sym::Range>& dims) {
  Model m = frontend::import_onnx_file(path);
  for (const auto& [name, r] : dims) m.ranges.set(name, r);
  verify_model(m);
  run_passes(m);
  std::map<std::string, int> h;
  for (const Node& n : m.graph->nodes) h[(n.domain.empty() ? "" : n.domain + "::") + n.op_type]++;
  return h;
}

// Compiles `model` with and without fuse-attention, runs both on `inputs` and compares every
// output file.
void expect_fused_matches_unfused(const std::string& model, const std::vector<Input>& inputs,
                                  const std::vector<std::string>& dim_args, const std::vector<std::string>& outputs) {
  TempDir tmp;
  std::vector<std::string> run_args;
  for (const Input& in : inputs) {
    const std::string file = tmp.file(in.name + ".npy");
    test::write_bytes(file, npy_file(in.descr, in.dims, in.data));
    run_args.push_back("--input");
    run_args.push_back(in.name + "=" + file);
  }
  for (const char* variant : {"fused", "unfused"}) {
    std::vector<std::string> args{"compile", model, "-o", tmp.file(std::string(variant) + ".cuvir")};
    args.insert(args.end(), dim_args.begin(), dim_args.end());
    if (std::string(variant) == "unfused") {
      args.push_back("--skip-pass");
      args.push_back("fuse-attention");
    }
    RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, args);
    ASSERT_EQ(c.exit_code, 0) << variant << ": " << c.err;
    std::vector<std::string> r_args{tmp.file(std::string(variant) + ".cuvir")};
    r_args.insert(r_args.end(), run_args.begin(), run_args.end());
    r_args.push_back("--output-dir");
    r_args.push_back(tmp.file(std::string("out_") + variant));
    RunResult r = run_tool(tmp.path(), CUVIL_RUN, r_args);
    ASSERT_EQ(r.exit_code, 0) << variant << ": " << r.err;
  }
  for (const std::string& name : outputs) {
    const std::vector<float> fused = npy_floats(tmp.file("out_fused/" + name + ".npy"));
    const std::vector<float> unfused = npy_floats(tmp.file("out_unfused/" + name + ".npy"));
    ASSERT_FALSE(unfused.empty()) << name;
    ASSERT_EQ(fused.size(), unfused.size()) << name;
    for (size_t i = 0; i < fused.size(); ++i)
      ASSERT_NEAR(fused[i], unfused[i], 1e-5 + 1e-4 * std::fabs(unfused[i])) << name << "[" << i << "]";
  }
}

std::vector<Input> bert_inputs() {
  const int64_t B = 2, S = 7;
  std::vector<int64_t> ids(B * S), mask(B * S, 1), types(B * S, 0);
  for (int64_t i = 0; i < B * S; ++i) ids[i] = (i * 37 + 11) % 512;
  for (int64_t j = 4; j < S; ++j) mask[S + j] = 0;  // the second sequence is padded
  for (int64_t j = 3; j < S; ++j) types[j] = 1;
  return {{"input_ids", "<i8", {B, S}, raw(ids)},
          {"attention_mask", "<i8", {B, S}, raw(mask)},
          {"token_type_ids", "<i8", {B, S}, raw(types)}};
}

TEST(FuseAttentionModels, BertTinyHasOneAttentionPerLayerAndNoSoftmax) {
  for (const char* model : {"bert_tiny.onnx", "bert_tiny_opset14.onnx", "bert_tiny_opset17.onnx"}) {
    SCOPED_TRACE(model);
    std::map<std::string, int> h = ops_after_passes(kSource + "/testdata/models/" + model, {});
    EXPECT_EQ(h["cuvil::Attention"], 1);  // bert_tiny has one layer
    EXPECT_EQ(h["Softmax"], 0);
    EXPECT_EQ(h["cuvil::MaskedSoftmax"], 0);
  }
}

TEST(FuseAttentionModels, BertTinyFusedMatchesUnfused) {
  for (const char* model : {"bert_tiny.onnx", "bert_tiny_opset14.onnx", "bert_tiny_opset17.onnx"}) {
    SCOPED_TRACE(model);
    expect_fused_matches_unfused(kSource + "/testdata/models/" + model, bert_inputs(), {},
                                 {"last_hidden_state", "pooler_output"});
  }
}

// The torch exports of HF-style GPT-2 (causal Where on the tril buffer, additive padding mask,
// KV cache) and LLaMA (rotary, GQA repeat_kv, additive causal mask), 2 layers each, from
// testdata/scripts/export_{gpt2,llama}.py. Skipped where those files are not checked in yet.
bool have_model(const std::string& name) {
  return ::access((kSource + "/testdata/models/" + name).c_str(), R_OK) == 0;
}

std::vector<Input> token_inputs(int64_t B, int64_t S, int64_t total, bool with_mask) {
  std::vector<int64_t> ids(B * S), mask(B * total, 1);
  for (int64_t i = 0; i < B * S; ++i) ids[i] = (i * 53 + 5) % 512;
  if (B > 1) mask[total] = 0;  // the second sequence's first position is padding
  std::vector<Input> in{{"input_ids", "<i8", {B, S}, raw(ids)}};
  if (with_mask) in.push_back({"attention_mask", "<i8", {B, total}, raw(mask)});
  return in;
}

TEST(FuseAttentionModels, Gpt2ExportsFuseWithRangesAndMatch) {
  for (const char* model : {"gpt2_tiny.onnx", "gpt2_tiny_past.onnx"}) {
    SCOPED_TRACE(model);
    if (!have_model(model)) GTEST_SKIP() << model << " is not in testdata/models";
    const bool past = std::string(model) == "gpt2_tiny_past.onnx";
    // The causal buffer is 64 long: T <= 64 must be provable for is_causal.
    std::map<std::string, sym::Range> ranges{{"seq", {1, 16}}};
    std::vector<std::string> dims{"--dim", "seq=1:16"};
    if (past) {
      ranges["past"] = {0, 16};
      dims.insert(dims.end(), {"--dim", "past=0:16"});
    }
    std::map<std::string, int> h = ops_after_passes(kSource + "/testdata/models/" + model, ranges);
    EXPECT_EQ(h["cuvil::Attention"], 2);
    EXPECT_EQ(h["Softmax"], 0);
    if (past) {
      EXPECT_EQ(h["Concat"], 0);
    }
    const int64_t B = 2, S = 3, P = past ? 2 : 0;
    std::vector<Input> in = token_inputs(B, S, P + S, true);
    for (int layer = 0; past && layer < 2; ++layer)
      for (const char* kind : {"past_key_", "past_value_"})
        in.push_back({kind + std::to_string(layer), "<f4", {B, 4, P, 32}, random_f32(B * 4 * P * 32)});
    std::vector<std::string> outs{"logits"};
    for (int layer = 0; past && layer < 2; ++layer)
      for (const char* kind : {"present_key_", "present_value_"}) outs.push_back(kind + std::to_string(layer));
    expect_fused_matches_unfused(kSource + "/testdata/models/" + model, in, dims, outs);
  }
}

// Without --dim the causal buffer's bound T <= 64 is not proven: every layer still fuses, with
// the sliced buffer as the mask (the graph fails unless T <= 64), and stays exact, including
// the query rows the left padding masks entirely. The cached export at past 0 and past 2.
TEST(FuseAttentionModels, Gpt2ExportsFuseWithoutRangesAndMatch) {
  for (const char* model : {"gpt2_tiny.onnx", "gpt2_tiny_past.onnx"}) {
    SCOPED_TRACE(model);
    if (!have_model(model)) GTEST_SKIP() << model << " is not in testdata/models";
    const bool past = std::string(model) == "gpt2_tiny_past.onnx";
    std::map<std::string, int> h = ops_after_passes(kSource + "/testdata/models/" + model, {});
    EXPECT_EQ(h["cuvil::Attention"], 2);
    EXPECT_EQ(h["Softmax"], 0);
    EXPECT_EQ(h["cuvil::MaskedSoftmax"], 0);
    for (int64_t P : past ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{0}) {
      SCOPED_TRACE(P);
      const int64_t B = 2, S = 3;
      std::vector<Input> in = token_inputs(B, S, P + S, true);
      for (int layer = 0; past && layer < 2; ++layer)
        for (const char* kind : {"past_key_", "past_value_"})
          in.push_back({kind + std::to_string(layer), "<f4", {B, 4, P, 32}, random_f32(B * 4 * P * 32)});
      std::vector<std::string> outs{"logits"};
      for (int layer = 0; past && layer < 2; ++layer)
        for (const char* kind : {"present_key_", "present_value_"}) outs.push_back(kind + std::to_string(layer));
      expect_fused_matches_unfused(kSource + "/testdata/models/" + model, in, {}, outs);
    }
  }
}

TEST(FuseAttentionModels, LlamaExportFusesAndMatches) {
  if (!have_model("llama_tiny.onnx")) GTEST_SKIP() << "llama_tiny.onnx is not in testdata/models";
  std::map<std::string, int> h = ops_after_passes(kSource + "/testdata/models/llama_tiny.onnx", {});
  EXPECT_EQ(h["cuvil::Attention"], 2);
  EXPECT_EQ(h["Softmax"], 0);
  expect_fused_matches_unfused(kSource + "/testdata/models/llama_tiny.onnx", token_inputs(2, 5, 5, false), {},
                               {"logits"});
}

// LLaMA's additive causal mask is proven causal: both Attentions are is_causal = 1 without a
// mask input, and the mask's Less/Where/ConstantOfShape/Expand are gone.
TEST(FuseAttentionModels, LlamaExportCausalMaskBecomesIsCausal) {
  if (!have_model("llama_tiny.onnx")) GTEST_SKIP() << "llama_tiny.onnx is not in testdata/models";
  Model m = frontend::import_onnx_file(kSource + "/testdata/models/llama_tiny.onnx");
  run_passes(m);
  int attention = 0;
  for (const Node& n : m.graph->nodes) {
    EXPECT_NE(n.op, OpKind::Less) << n.name;
    EXPECT_NE(n.op, OpKind::ConstantOfShape) << n.name;
    if (n.op != OpKind::Attention) continue;
    ++attention;
    EXPECT_EQ(n.attr_int("is_causal", 0), 1) << n.name;
    EXPECT_EQ(n.input(3), kNoValue) << n.name;
  }
  EXPECT_EQ(attention, 2);
}

TEST(FuseAttentionModels, Gpt2TwoLayersFuseWithoutRanges) {
  const std::map<std::string, int> h = ops_after_passes(kCases + "gpt2_two_layers.onnx", {});
  EXPECT_EQ(h.count("Softmax"), 0u);
  EXPECT_EQ(h.at("cuvil::Attention"), 2);
  std::vector<float> padding(2 * 5, 0.0f);
  padding[5] = -3.4028235e38f;  // batch 1, key 0: query 0's row is masked entirely
  std::vector<Input> in;
  for (const char* n : {"q", "k", "v"}) in.push_back({n, "<f4", {2, 2, 5, 4}, random_f32(80, 2.0f)});
  in.push_back({"padding", "<f4", {2, 1, 1, 5}, raw(padding)});
  expect_fused_matches_unfused(kCases + "gpt2_two_layers.onnx", in, {}, {"y"});
}

TEST(FuseAttentionModels, LlamaCausalMaskProvenElementByElement) {
  Model m = frontend::import_onnx_file(kCases + "llama_causal_mask.onnx");
  run_passes(m);
  std::map<std::string, int> causal;  // output name -> is_causal
  for (const Node& n : m.graph->nodes)
    if (n.op == OpKind::Attention)
      causal[m.graph->value(n.outputs[0]).name] = static_cast<int>(n.attr_int("is_causal", 0));
  const std::map<std::string, int> want = {{"y_causal", 1}, {"y_shifted", 0}, {"y_anti", 0}};
  EXPECT_EQ(causal, want);
  std::vector<Input> in;
  for (const char* n : {"q", "k", "v"}) in.push_back({n, "<f4", {2, 2, 5, 4}, random_f32(80, 2.0f)});
  expect_fused_matches_unfused(kCases + "llama_causal_mask.onnx", in, {}, {"y_causal", "y_shifted", "y_anti"});
}

TEST(FuseAttentionModels, Gpt2CacheCausalBecomesCausalAttentionWithPresent) {
  const std::map<std::string, int> h =
      ops_after_passes(kCases + "gpt2_cache_causal.onnx", {{"past", {0, 4}}, {"seq", {1, 4}}});
  EXPECT_EQ(h.count("Softmax"), 0u);
  EXPECT_EQ(h.count("Where"), 0u);
  EXPECT_EQ(h.count("Concat"), 0u);  // the cache concatenation is Attention's present outputs
  EXPECT_EQ(h.at("cuvil::Attention"), 1);
  std::vector<Input> in;
  for (const char* n : {"q", "k", "v"}) in.push_back({n, "<f4", {1, 2, 3, 4}, random_f32(24, 2.0f)});
  for (const char* n : {"past_key", "past_value"}) in.push_back({n, "<f4", {1, 2, 2, 4}, random_f32(16, 2.0f)});
  expect_fused_matches_unfused(kCases + "gpt2_cache_causal.onnx", in, {"--dim", "past=0:4", "--dim", "seq=1:4"},
                               {"y", "present_key", "present_value"});
}

// A padded first position makes query 0's row fully masked (causal and padding): the unfused
// graph gives it uniform weights, which only the float-mask rewrite reproduces.
TEST(FuseAttentionModels, Gpt2PaddingMaskStaysExactOnFullyMaskedRows) {
  const std::map<std::string, int> h = ops_after_passes(kCases + "gpt2_padding_mask.onnx", {{"seq", {1, 8}}});
  EXPECT_EQ(h.count("Softmax"), 0u);
  EXPECT_EQ(h.at("cuvil::Attention"), 1);
  std::vector<float> padding(2 * 4, 0.0f);
  padding[4] = -3.4028235e38f;  // batch 1, key 0
  std::vector<Input> in;
  for (const char* n : {"q", "k", "v"}) in.push_back({n, "<f4", {2, 2, 4, 4}, random_f32(64, 2.0f)});
  in.push_back({"padding", "<f4", {2, 1, 1, 4}, raw(padding)});
  expect_fused_matches_unfused(kCases + "gpt2_padding_mask.onnx", in, {"--dim", "seq=1:8"}, {"y"});
}

TEST(FuseAttentionModels, LlamaGroupedQueryWithMask) {
  const std::map<std::string, int> h = ops_after_passes(kCases + "llama_gqa_mask.onnx", {{"seq", {1, 8}}});
  EXPECT_EQ(h.count("Softmax"), 0u);
  EXPECT_EQ(h.count("Expand"), 0u);  // repeat_kv absorbed: Attention reads the 2 key/value heads
  EXPECT_EQ(h.at("cuvil::Attention"), 1);
  std::vector<float> mask(2 * 3 * 3);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) mask[(b * 3 + i) * 3 + j] = j <= i ? 0.0f : -3.4e38f;
  expect_fused_matches_unfused(kCases + "llama_gqa_mask.onnx",
                               {{"q", "<f4", {2, 4, 3, 8}, random_f32(192, 2.0f)},
                                {"k", "<f4", {2, 2, 3, 8}, random_f32(96, 2.0f)},
                                {"v", "<f4", {2, 2, 3, 8}, random_f32(96)},
                                {"mask", "<f4", {2, 1, 3, 3}, raw(mask)}},
                               {}, {"y"});
}

TEST(FuseAttentionModels, UnprovableAttentionIsLeftAlone) {
  const std::map<std::string, int> h = ops_after_passes(kCases + "attention_left_alone.onnx", {});
  EXPECT_EQ(h.count("cuvil::Attention"), 0u);
  EXPECT_EQ(h.at("cuvil::MaskedSoftmax"), 1);  // the late scale still folds into the softmax
  EXPECT_EQ(h.at("Softmax"), 1);
  std::vector<Input> in;
  for (const char* n : {"q", "k", "v"}) in.push_back({n, "<f4", {1, 2, 3, 4}, random_f32(24, 2.0f)});
  in.push_back({"m", "<f4", {1, 1, 1, 3}, random_f32(3, 2.0f)});
  in.push_back({"q1", "<f4", {1, 1, 3, 4}, random_f32(12, 2.0f)});
  expect_fused_matches_unfused(kCases + "attention_left_alone.onnx", in, {}, {"y_scale_after_mask", "y_broadcast_heads"});
}

TEST(FuseAttentionModels, SoftmaxAloneBecomesMaskedSoftmax) {
  const std::map<std::string, int> h = ops_after_passes(kCases + "softmax_only.onnx", {});
  EXPECT_EQ(h.at("cuvil::MaskedSoftmax"), 5);  // float mask + scale; bool mask; both; 2 masked_fill
  EXPECT_EQ(h.at("Not"), 1);                   // masked_fill(cond, -inf) keeps Not(cond)
  EXPECT_EQ(h.at("Softmax"), 2);  // a scale that is not a constant; not the last axis
  std::vector<uint8_t> keep{1, 0, 1, 1, 0};
  std::vector<float> s{0.75f};
  expect_fused_matches_unfused(kCases + "softmax_only.onnx",
                               {{"x", "<f4", {2, 3, 5}, random_f32(30, 3.0f)},
                                {"m", "<f4", {3, 5}, random_f32(15)},
                                {"keep", "|b1", {1, 5}, raw(keep)},
                                {"s", "<f4", {}, raw(s)}},
                               {}, {"y_float_mask", "y_bool_mask", "y_dynamic_scale", "y_two_masks", "y_not_last_axis",
                                "y_masked_fill", "y_masked_fill_inf"});
}

}  // namespace
}  // namespace cuvil
