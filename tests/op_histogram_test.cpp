// Op histograms after the whole pass pipeline, one golden file per model family
// (testdata/golden/<model>.ops: "op count" lines, sorted): what the middle end leaves as
// run-time work for real exports. A pass that stops folding, canonicalising or merging shows up
// here as a diff; CUVIL_UPDATE_GOLDEN=1 rewrites the files (then review the diff). Every model
// is also checked for what must never remain after the passes.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "golden_file.h"
#include "passes/pipeline.h"

namespace cuvil {
namespace {

void count(const Graph& g, std::map<std::string, int>& h) {
  for (const Node& n : g.nodes) {
    h[(n.domain.empty() ? "" : n.domain + "::") + n.op_type]++;
    for (const auto& [key, a] : n.attrs) {
      if (a.g) count(*a.g, h);
      for (const auto& s : a.graphs) count(*s, h);
    }
  }
}

std::string histogram_after_passes(const std::string& model_rel) {
  Model m = frontend::import_onnx_file(std::string(CUVIL_SOURCE_DIR) + "/" + model_rel);
  verify_model(m);
  run_passes(m);
  std::map<std::string, int> h;
  count(*m.graph, h);
  std::ostringstream os;
  for (const auto& [op, n] : h) os << op << " " << n << "\n";
  return os.str();
}

void check_histogram(const std::string& name, const std::string& text) {
  test::check_golden_file("testdata/golden/" + name + ".ops", text);
}

// Ops the passes must have removed from every model: constants become weights, shape
// arithmetic becomes cuvil::SymbolicInts, Dropout goes. (Identity may stay as a loop body's
// output of a captured value; ConstantOfShape over symbolic extents is run-time work until
// generators lower to tile code.)
void expect_no_leftovers(const std::string& text) {
  const std::string lines = "\n" + text;
  for (const char* op : {"Constant ", "Shape ", "Dropout "})
    EXPECT_EQ(lines.find(std::string("\n") + op), std::string::npos) << op << "remains:\n" << text;
}

TEST(OpHistogram, BertTinyOpset13) {
  const std::string h = histogram_after_passes("testdata/models/bert_tiny.onnx");
  expect_no_leftovers(h);
  EXPECT_NE(h.find("LayerNormalization 3\n"), std::string::npos) << h;
  // The canonicalised Gelu is the epilogue of the intermediate dense layer's FusedMatMul.
  EXPECT_EQ(h.find("Gelu "), std::string::npos) << h;
  // Seven dense layers (q, k, v, attention output, intermediate, output, pooler); the
  // attention's two products are inside the one cuvil::Attention.
  EXPECT_NE(h.find("cuvil::FusedMatMul 7\n"), std::string::npos) << h;
  EXPECT_NE(h.find("cuvil::Attention 1\n"), std::string::npos) << h;
  EXPECT_EQ(h.find("Softmax "), std::string::npos) << h;
  EXPECT_EQ(h.find("Erf "), std::string::npos) << h;
  EXPECT_EQ(h.find("ReduceMean "), std::string::npos) << h;
  check_histogram("bert_tiny", h);
}

TEST(OpHistogram, BertTinyOpset17) {
  const std::string h = histogram_after_passes("testdata/models/bert_tiny_opset17.onnx");
  expect_no_leftovers(h);
  check_histogram("bert_tiny_opset17", h);
}

TEST(OpHistogram, Resnet18) {
  const std::string h = histogram_after_passes("testdata/models/resnet18.onnx");
  expect_no_leftovers(h);
  // Every conv block is one FusedConv: conv + residual Add + Relu (fuse-epilogues).
  for (const char* op : {"Conv ", "Relu ", "Add "})
    EXPECT_EQ(("\n" + h).find(std::string("\n") + op), std::string::npos) << op << "remains:\n" << h;
  check_histogram("resnet18", h);
}

// bert_tiny's dense layers after fuse-epilogues: the epilogue each FusedMatMul carries.
TEST(OpHistogram, BertTinyDenseLayersCarryTheirEpilogues) {
  Model m = frontend::import_onnx_file(std::string(CUVIL_SOURCE_DIR) + "/testdata/models/bert_tiny.onnx");
  run_passes(m);
  std::map<std::string, int> kinds;
  for (const Node& n : m.graph->nodes) {
    if (n.op != OpKind::FusedMatMul) continue;
    std::string k = n.input(2) != kNoValue ? "bias" : "";
    if (n.input(3) != kNoValue) k += "+residual";
    if (!n.attr_string("activation", "").empty()) k += "+" + n.attr_string("activation", "");
    if (n.attr_float("alpha", 1.f) != 1.f) k += " alpha";
    kinds[k]++;
  }
  // q, k, v; attention output and output dense layers with their skip connection; intermediate
  // with gelu; pooler (Gemm). The attention scores are inside the cuvil::Attention.
  const std::map<std::string, int> want = {
      {"bias", 3}, {"bias+residual", 2}, {"bias+gelu", 1}, {"bias+tanh", 1}};
  EXPECT_EQ(kinds, want);
}

TEST(OpHistogram, TorchScriptedLoop) {
  const std::string h = histogram_after_passes("testdata/models/loop_append.onnx");
  expect_no_leftovers(h);
  EXPECT_EQ(h.find("SequenceInsert"), std::string::npos) << h;
  check_histogram("loop_append", h);
}

// The decoder and MobileNet exports (testdata/models/README.md). Their golden files record what
// the passes leave today; besides what must never remain, the attention is asserted: every
// attention block (2 layers each) is one cuvil::Attention with the default compile (no --dim),
// and no Softmax is left.
void expect_one_attention_per_layer(const std::string& h, int layers) {
  EXPECT_NE(h.find("cuvil::Attention " + std::to_string(layers) + "\n"), std::string::npos) << h;
  EXPECT_EQ(h.find("Softmax "), std::string::npos) << h;
  EXPECT_EQ(h.find("cuvil::MaskedSoftmax "), std::string::npos) << h;
}

TEST(OpHistogram, Gpt2Tiny) {
  const std::string h = histogram_after_passes("testdata/models/gpt2_tiny.onnx");
  expect_no_leftovers(h);
  expect_one_attention_per_layer(h, 2);
  // gelu_new after each MLP's Conv1D (Gemm, Reshape back to 3-D) is its FusedMatMul's epilogue.
  EXPECT_EQ(h.find("Gelu "), std::string::npos) << h;
  EXPECT_NE(h.find("cuvil::FusedMatMul 2\n"), std::string::npos) << h;
  check_histogram("gpt2_tiny", h);
}

TEST(OpHistogram, Gpt2TinyPast) {
  const std::string h = histogram_after_passes("testdata/models/gpt2_tiny_past.onnx");
  expect_no_leftovers(h);
  expect_one_attention_per_layer(h, 2);
  // The cache concatenations are the Attentions' present outputs.
  EXPECT_EQ(h.find("Concat "), std::string::npos) << h;
  check_histogram("gpt2_tiny_past", h);
}

TEST(OpHistogram, LlamaTiny) {
  const std::string h = histogram_after_passes("testdata/models/llama_tiny.onnx");
  expect_no_leftovers(h);
  expect_one_attention_per_layer(h, 2);
  // The additive causal mask is is_causal: nothing computes it at run time.
  for (const char* op : {"Less ", "ConstantOfShape ", "Expand ", "Where "})
    EXPECT_EQ(("\n" + h).find(std::string("\n") + op), std::string::npos) << op << "remains:\n" << h;
  check_histogram("llama_tiny", h);
}

TEST(OpHistogram, MobilenetV2Tiny) {
  // The export keeps every BatchNormalization (one per Conv) for the compiler to fold.
  Model imported =
      frontend::import_onnx_file(std::string(CUVIL_SOURCE_DIR) + "/testdata/models/mobilenet_v2_tiny.onnx");
  std::map<std::string, int> before;
  count(*imported.graph, before);
  EXPECT_EQ(before["BatchNormalization"], 52);
  EXPECT_EQ(before["Conv"], 52);
  const std::string h = histogram_after_passes("testdata/models/mobilenet_v2_tiny.onnx");
  expect_no_leftovers(h);
  check_histogram("mobilenet_v2_tiny", h);
}

}  // namespace
}  // namespace cuvil
