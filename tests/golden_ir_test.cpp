// Golden IR tests: each model in testdata/models/ is imported, shape-inferred and printed; the
// text must equal testdata/golden/<model>.ir. Run with CUVIL_UPDATE_GOLDEN=1 to rewrite the
// expectations (then review the diff). The exported BERT and ResNet models must also come out
// with every value's shape fully known, and the named output shapes the issue asks for.
#include <gtest/gtest.h>


#include "frontend/onnx_import.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "golden_file.h"
#include "passes/infer_shapes.h"

namespace cuvil {
namespace {

std::string source(const std::string& rel) { return std::string(CUVIL_SOURCE_DIR) + "/" + rel; }

Model compile_to_ir(const std::string& model_rel) {
  Model m = frontend::import_onnx_file(source(model_rel));
  verify_model(m);
  infer_shapes(m);
  verify_model(m);
  return m;
}

void check_golden(const std::string& name, const std::string& text) {
  test::check_golden_file("testdata/golden/" + name + ".ir", text);
}

std::string output_type(const Model& m, const std::string& name) {
  const Graph& g = *m.graph;
  for (ValueId id : g.outputs)
    if (g.value(id).name == name) return type_to_string(g.value(id));
  return "<no output " + name + ">";
}

void expect_all_shapes_known(const Model& m) {
  ShapeCoverage cov = shape_coverage(m, 10);
  EXPECT_EQ(cov.fully_known, cov.values) << [&] {
    std::string s = "values without a fully known shape:";
    for (const auto& u : cov.unknown) s += "\n  " + u;
    return s;
  }();
}

TEST(GoldenIr, BertTinyOpset13) {
  Model m = compile_to_ir("testdata/models/bert_tiny.onnx");
  expect_all_shapes_known(m);
  EXPECT_EQ(output_type(m, "last_hidden_state"), "f32[batch, seq, 768]");
  EXPECT_EQ(output_type(m, "pooler_output"), "f32[batch, 768]");
  check_golden("bert_tiny", model_to_string(m));
}

TEST(GoldenIr, BertTinyOpset17) {
  Model m = compile_to_ir("testdata/models/bert_tiny_opset17.onnx");
  expect_all_shapes_known(m);
  EXPECT_EQ(output_type(m, "last_hidden_state"), "f32[batch, seq, 768]");
  check_golden("bert_tiny_opset17", model_to_string(m));
}

TEST(GoldenIr, Resnet18) {
  Model m = compile_to_ir("testdata/models/resnet18.onnx");
  expect_all_shapes_known(m);
  EXPECT_EQ(output_type(m, "logits"), "f32[batch, 1000]");
  check_golden("resnet18", model_to_string(m));
}

TEST(GoldenIr, DimOptionFixesASymbol) {
  frontend::ImportOptions opt;
  opt.dims.push_back(frontend::parse_dim_option("batch=1"));
  Model m = frontend::import_onnx_file(source("testdata/models/resnet18.onnx"), opt);
  infer_shapes(m);
  EXPECT_EQ(output_type(m, "logits"), "f32[1, 1000]");
}

}  // namespace
}  // namespace cuvil
