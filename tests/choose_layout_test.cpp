// FusedConv's and the pools' channels-last forms outside the golden cases (suite ChooseLayout):
// the shape rules of layout = "NHWC" (passes/shape/nn.cpp), their diagnostics, and the pass
// choose-layout's counts, pool rules and idempotence (passes/choose_layout.h).
#include <gtest/gtest.h>

#include <map>

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

std::string type_of(const Model& m, const std::string& name) {
  return type_to_string(m.graph->values[static_cast<size_t>(m.graph->find(name))]);
}

std::string expect_diagnostic(Model& m) {
  try {
    infer_shapes(m);
  } catch (const Diagnostic& d) {
    return d.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(ChooseLayout, PoolNhwcShapeRules) {
  const std::string head = "model {\n  ir_version = 8\n  opset \"\" = 19\n}\n";
  Model m = parse(head +
                  "graph g(%x: f32[2, 9, 8, 5], %v: f32[2, 7, 5], %d: f64[2, 9, 8, 5]) -> (%mp, %ap, %gap, %gmp, %one) {\n"
                  "  %mp: ?[*] = MaxPool<12>(%x) {kernel_shape = ints[3, 3], layout = \"NHWC\", pads = ints[1, 1, 1, 1], strides = ints[2, 2]}\n"
                  "  %ap: ?[*] = AveragePool<19>(%x) {ceil_mode = 1, kernel_shape = ints[2, 2], layout = \"NHWC\", strides = ints[2, 2]}\n"
                  "  %gap: ?[*] = GlobalAveragePool<1>(%x) {layout = \"NHWC\"}\n"
                  "  %gmp: ?[*] = GlobalMaxPool<1>(%x) {layout = \"NHWC\"}\n"
                  "  %one: ?[*] = MaxPool<12>(%v) {kernel_shape = ints[2], layout = \"NHWC\"}\n}\n");
  infer_shapes(m);
  EXPECT_EQ(type_of(m, "mp"), "f32[2, 5, 4, 5]");
  EXPECT_EQ(type_of(m, "ap"), "f32[2, 5, 4, 5]");
  EXPECT_EQ(type_of(m, "gap"), "f32[2, 1, 1, 5]");
  EXPECT_EQ(type_of(m, "gmp"), "f32[2, 1, 1, 5]");
  EXPECT_EQ(type_of(m, "one"), "f32[2, 6, 5]");
  // The printed form parses back to the same text.
  const std::string text = model_to_string(m);
  EXPECT_EQ(model_to_string(parse(text)), text);

  const std::string g = "graph g(%x: f32[2, 9, 8, 5], %d: f64[2, 9, 8, 5]) -> (%y) {\n";
  Model indices = parse(head + g + "  %y: ?[*], %i: ?[*] = MaxPool<12>(%x) {kernel_shape = ints[2, 2], layout = \"NHWC\"}\n}\n");
  EXPECT_NE(expect_diagnostic(indices).find("layout NHWC has no Indices output (output 1 of MaxPool)"), std::string::npos);
  Model f64 = parse(head + g + "  %y: ?[*] = GlobalMaxPool<1>(%d) {layout = \"NHWC\"}\n}\n");
  EXPECT_NE(expect_diagnostic(f64).find("layout NHWC takes float32 only, input 'd' is f64"), std::string::npos);
  Model lp = parse(head + g + "  %y: ?[*] = LpPool<18>(%x) {kernel_shape = ints[2, 2], layout = \"NHWC\"}\n}\n");
  EXPECT_NE(expect_diagnostic(lp).find("layout NHWC is not supported by LpPool"), std::string::npos);
  Model odd = parse(head + g + "  %y: ?[*] = GlobalAveragePool<1>(%x) {layout = \"NCWH\"}\n}\n");
  EXPECT_NE(expect_diagnostic(odd).find("attribute 'layout' is 'NCWH', not NCHW or NHWC"), std::string::npos);
}

// Pools inside a chain and after it run NHWC; a pool in front of the first conv, a MaxPool
// whose Indices are read, and pools with no conv before them stay NCHW.
TEST(ChooseLayout, PoolsJoinTheChain) {
  const std::string text =
      "model {\n  ir_version = 8\n  opset \"\" = 17\n}\n"
      "graph g(%x: f32[1, 4, 16, 16]) -> (%out, %qi, %alone) {\n"
      "  %w: f32[4, 4, 3, 3] = const elided<576>\n"
      "  %pre: f32[1, 4, 8, 8] = AveragePool<19>(%x) {kernel_shape = ints[2, 2], strides = ints[2, 2]} @\"pre\"\n"
      "  %c1: f32[1, 4, 8, 8] = \"cuvil\"::FusedConv<1>(%pre, %w) {pads = ints[1, 1, 1, 1]} @\"c1\"\n"
      "  %p: f32[1, 4, 4, 4], %pi: i64[1, 4, 4, 4] = MaxPool<12>(%c1) {kernel_shape = ints[3, 3], pads = ints[1, 1, 1, 1], strides = ints[2, 2]} @\"pool\"\n"
      "  %c2: f32[1, 4, 4, 4] = \"cuvil\"::FusedConv<1>(%p, %w) {pads = ints[1, 1, 1, 1]} @\"c2\"\n"
      "  %q: f32[1, 4, 4, 4], %qi: i64[1, 4, 4, 4] = MaxPool<12>(%c2) {kernel_shape = ints[3, 3], pads = ints[1, 1, 1, 1]} @\"indices_read\"\n"
      "  %c3: f32[1, 4, 4, 4] = \"cuvil\"::FusedConv<1>(%c2, %w, _, %q) {pads = ints[1, 1, 1, 1]} @\"c3\"\n"
      "  %a: f32[1, 4, 3, 3] = AveragePool<19>(%c3) {ceil_mode = 1, count_include_pad = 1, kernel_shape = ints[2, 2], pads = ints[1, 1, 0, 0], strides = ints[2, 2]} @\"avg\"\n"
      "  %gap: f32[1, 4, 1, 1] = GlobalAveragePool<1>(%a) @\"gap\"\n"
      "  %out: f32[1, 4] = Flatten<13>(%gap) {axis = 1} @\"flatten\"\n"
      "  %lp: f32[1, 4, 8, 8] = MaxPool<12>(%x) {kernel_shape = ints[2, 2], strides = ints[2, 2]} @\"lone_pool\"\n"
      "  %alone: f32[1, 4, 1, 1] = GlobalMaxPool<1>(%lp) @\"lone_global\"\n}\n";
  Model m = parse(text);
  verify_model(m);
  const ChooseLayoutStats s = choose_layout(m, LayoutChoice::kNhwc);
  verify_model(m);
  EXPECT_EQ(s.chains, 1);
  EXPECT_EQ(s.convs, 3);
  EXPECT_EQ(s.pools, 3);  // pool, avg, gap
  EXPECT_EQ(s.transposes, 4);  // pre and q in; c2 (read by indices_read) and gap out
  std::map<std::string, std::string> layout;
  std::map<std::string, size_t> outputs;
  for (const Node& n : m.graph->nodes) {
    layout[n.name] = n.attr_string("layout", "NCHW");
    outputs[n.name] = n.outputs.size();
  }
  for (const char* name : {"c1", "pool", "c2", "c3", "avg", "gap"}) EXPECT_EQ(layout[name], "NHWC") << name;
  for (const char* name : {"pre", "indices_read", "lone_pool", "lone_global"}) EXPECT_EQ(layout[name], "NCHW") << name;
  EXPECT_EQ(outputs["pool"], 1u);  // the unread Indices are gone
  EXPECT_EQ(outputs["indices_read"], 2u);
  EXPECT_EQ(type_of(m, "gap_nhwc"), "f32[1, 1, 1, 4]");
  EXPECT_EQ(type_of(m, "a_nhwc"), "f32[1, 3, 3, 4]");
  infer_shapes(m);  // the rewritten graph's shapes check out
  EXPECT_EQ(type_of(m, "gap"), "f32[1, 4, 1, 1]");
  const std::string once = model_to_string(m);
  const ChooseLayoutStats again = choose_layout(m, LayoutChoice::kNhwc);
  EXPECT_EQ(again.convs + again.pools, 0);
  EXPECT_EQ(model_to_string(m), once);

  // layout auto sizes chains by their convs: the same three convs are enough...
  Model a = parse(text);
  EXPECT_EQ(choose_layout(a, LayoutChoice::kAuto).pools, 3);
  // ...while pools alone never make a chain.
  Model pools_only = parse(
      "model {\n  ir_version = 8\n  opset \"\" = 17\n}\n"
      "graph g(%x: f32[1, 4, 8, 8]) -> (%y) {\n"
      "  %p: f32[1, 4, 4, 4] = MaxPool<12>(%x) {kernel_shape = ints[2, 2], strides = ints[2, 2]}\n"
      "  %y: f32[1, 4, 1, 1] = GlobalAveragePool<1>(%p)\n}\n");
  const ChooseLayoutStats none = choose_layout(pools_only, LayoutChoice::kNhwc);
  EXPECT_EQ(none.pools + none.transposes, 0);
}

}  // namespace
}  // namespace cuvil
