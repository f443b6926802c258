// FusedConv's channels-last form outside the golden cases (suite ChooseLayout): the shape rule
// of layout = "NHWC" (passes/shape/nn.cpp), its diagnostic for an unknown layout, and the pass
// choose-layout's counts and idempotence (passes/choose_layout.h).
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/choose_layout.h"
#include "passes/infer_shapes.h"
#include "support/error.h"

namespace cuvil {
namespace {

Model parse(const std::string& text) {
  std::string error;
  std::optional<Model> m = parse_model(text, &error);
  EXPECT_TRUE(m.has_value()) << error;
  return std::move(*m);
}

std::string conv_model(const std::string& layout, const std::string& x_type) {
  return "model {\n  ir_version = 8\n  opset \"\" = 17\n}\n"
         "graph g(%x: " + x_type + ") -> (%y) {\n"
         "  %w: f32[6, 2, 3, 3] = const elided<432>\n"
         "  %y: ?[*] = \"cuvil\"::FusedConv<1>(%x, %w) {group = 2, layout = \"" + layout +
         "\", pads = ints[1, 0, 1, 0], strides = ints[2, 2]} @\"c\"\n}\n";
}

TEST(ChooseLayout, NhwcShapeRule) {
  Model m = parse(conv_model("NHWC", "f32[2, 9, 8, 4]"));
  infer_shapes(m);
  const Graph& g = *m.graph;
  EXPECT_EQ(type_to_string(g.values[static_cast<size_t>(g.find("y"))]), "f32[2, 5, 3, 6]");
  Model n = parse(conv_model("NCHW", "f32[2, 4, 9, 8]"));
  infer_shapes(n);
  EXPECT_EQ(type_to_string(n.graph->values[static_cast<size_t>(n.graph->find("y"))]), "f32[2, 6, 5, 3]");
}

TEST(ChooseLayout, UnknownLayoutAttributeIsRefused) {
  Model m = parse(conv_model("CHWN", "f32[2, 9, 8, 4]"));
  try {
    infer_shapes(m);
    ADD_FAILURE() << "layout CHWN accepted";
  } catch (const Diagnostic& d) {
    EXPECT_NE(std::string(d.what()).find("attribute 'layout' is 'CHWN', not NCHW or NHWC"), std::string::npos)
        << d.what();
  }
  // NHWC reads the channels from the last axis: 9 rows are not 2 groups of W's 2 channels.
  Model wrong = parse(conv_model("NHWC", "f32[2, 4, 9, 9]"));
  EXPECT_THROW(infer_shapes(wrong), Diagnostic);
}

TEST(ChooseLayout, CountsAndRunsOnce) {
  const std::string text =
      "model {\n  ir_version = 8\n  opset \"\" = 17\n}\n"
      "graph g(%x: f32[1, 4, 8, 8]) -> (%c3, %side) {\n"
      "  %w: f32[4, 4, 3, 3] = const elided<576>\n"
      "  %c1: f32[1, 4, 8, 8] = \"cuvil\"::FusedConv<1>(%x, %w) {pads = ints[1, 1, 1, 1]} @\"c1\"\n"
      "  %c2: f32[1, 4, 8, 8] = \"cuvil\"::FusedConv<1>(%c1, %w) {pads = ints[1, 1, 1, 1]} @\"c2\"\n"
      "  %c3: f32[1, 4, 8, 8] = \"cuvil\"::FusedConv<1>(%c2, %w, _, %c1) {pads = ints[1, 1, 1, 1]} @\"c3\"\n"
      "  %side: f32[1, 4, 8, 8] = Relu<14>(%c2) @\"side\"\n}\n";
  Model m = parse(text);
  verify_model(m);
  EXPECT_EQ(choose_layout(m, LayoutChoice::kNchw).convs, 0);
  const ChooseLayoutStats s = choose_layout(m, LayoutChoice::kAuto);
  verify_model(m);
  EXPECT_EQ(s.chains, 1);
  EXPECT_EQ(s.convs, 3);
  EXPECT_EQ(s.transposes, 3);  // x in; c2 (read by Relu) and c3 (graph output) out
  infer_shapes(m);  // the rewritten graph's shapes check out
  const std::string once = model_to_string(m);
  EXPECT_EQ(choose_layout(m, LayoutChoice::kNhwc).convs, 0);  // NHWC convs are not eligible again
  EXPECT_EQ(model_to_string(m), once);
  EXPECT_EQ(parse_layout_choice("nhwc"), LayoutChoice::kNhwc);
  EXPECT_FALSE(parse_layout_choice("NHWC").has_value());
}

}  // namespace
}  // namespace cuvil
