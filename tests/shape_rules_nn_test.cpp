// Unit tests for the shape rules of the nn, linalg, reduce, rnn, signal, misc and control-flow
// op families (passes/shape/{nn,linalg,reduce,rnn,signal,misc,control}.cpp). Each test builds a
// small Model by hand, runs infer_shapes and compares the printed dims. Expected symbolic dims
// are built with the same DimExpr API rather than typed as text, so the tests check the rule's
// arithmetic, not the canonical printing (which tests/symbolic_test.cpp owns). Failure tests
// expect a Diagnostic naming the node and the offending attribute.
#include <gtest/gtest.h>


#include "shape_test_util.h"

namespace cuvil {
namespace {

using sym::DimExpr;

DimExpr S(const char* name) { return DimExpr::symbol(name); }

using shape_test::graph_attr;
using shape_test::int_attr;
using shape_test::ints_attr;
using shape_test::string_attr;

std::string dims(const Value& v) { return shape_test::shape_string(v); }

std::string dims(std::initializer_list<Dim> expected) {
  Value v;
  v.shape = Shape(expected);
  return dims(v);
}

// Builds nodes into one graph (the model's main graph or a subgraph).
class GraphBuilder {
 public:
  explicit GraphBuilder(Graph* g, int opset = 17) : g_(g), opset_(opset) {}

  ValueId input(const std::string& name, DType dtype, std::optional<Shape> shape) {
    ValueId id = g_->add_value(name);
    g_->value(id).dtype = dtype;
    g_->value(id).shape = std::move(shape);
    g_->inputs.push_back(id);
    return id;
  }
  ValueId ints(const std::string& name, std::vector<int64_t> values, bool as_scalar = false) {
    const int64_t n = static_cast<int64_t>(values.size());
    ValueId id = g_->add_value(name);
    Value& v = g_->value(id);
    v.dtype = DType::Int64;
    v.shape = as_scalar ? Shape{} : Shape{DimExpr(n)};
    v.data = shape_test::tensor<int64_t>(DType::Int64, as_scalar ? std::vector<int64_t>{} : std::vector<int64_t>{n},
                                         std::move(values));
    v.is_initializer = true;
    return id;
  }
  ValueId capture(const std::string& name, ValueId outer) {
    ValueId id = g_->add_value(name);
    g_->value(id).outer = outer;
    g_->captures.push_back(id);
    return id;
  }
  std::vector<ValueId> node(OpKind op, std::vector<ValueId> inputs, size_t n_outputs,
                            std::map<std::string, Attribute> attrs = {}, int opset = 0) {
    Node n;
    n.op = op;
    n.op_type = op_name(op);
    n.opset = opset ? opset : opset_;
    n.name = std::string(op_name(op)) + "_" + std::to_string(g_->nodes.size());
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    for (size_t i = 0; i < n_outputs; ++i) {
      ValueId id = g_->add_value(n.name + "_out" + std::to_string(i));
      g_->value(id).producer = static_cast<int32_t>(g_->nodes.size());
      n.outputs.push_back(id);
    }
    g_->nodes.push_back(std::move(n));
    return g_->nodes.back().outputs;
  }
  ValueId node1(OpKind op, std::vector<ValueId> inputs, std::map<std::string, Attribute> attrs = {},
                int opset = 0) {
    return node(op, std::move(inputs), 1, std::move(attrs), opset)[0];
  }
  const Value& v(ValueId id) const { return g_->value(id); }
  Graph& graph() { return *g_; }

 private:
  Graph* g_;
  int opset_;
};

struct TestModel {
  Model model;
  GraphBuilder b;
  explicit TestModel(int opset = 17) : b(make(model, opset), opset) {}
  static Graph* make(Model& m, int opset) {
    m.graph = std::make_shared<Graph>();
    m.graph->name = "main";
    m.opset_imports[""] = opset;
    return m.graph.get();
  }
  void infer() { infer_shapes(model); }
  // Runs inference expecting an invalid-model diagnostic; returns its message.
  std::string infer_error() {
    try {
      infer_shapes(model);
    } catch (const Diagnostic& d) {
      EXPECT_EQ(d.code(), ExitCode::kInvalidModel);
      return d.what();
    }
    ADD_FAILURE() << "expected a diagnostic";
    return "";
  }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- convolution and pooling ----

TEST(ShapeRulesNn, ConvResNetStem) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), 3, 224, 224});
  ValueId w = t.b.input("w", DType::Float, Shape{64, 3, 7, 7});
  ValueId y = t.b.node1(OpKind::Conv, {x, w},
                        {{"kernel_shape", ints_attr({7, 7})},
                         {"strides", ints_attr({2, 2})},
                         {"pads", ints_attr({3, 3, 3, 3})}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[batch, 64, 112, 112]");
  EXPECT_EQ(t.b.v(y).dtype, DType::Float);
}

TEST(ShapeRulesNn, ConvSymbolicSpatialIsFloorDivExpression) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), 3, S("h"), S("w")});
  ValueId w = t.b.input("w", DType::Float, Shape{16, 3, 3, 3});  // kernel from the weight
  ValueId y = t.b.node1(OpKind::Conv, {x, w},
                        {{"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}});
  t.infer();
  // floordiv(in + pad_begin + pad_end - dilation*(k-1) - 1, stride) + 1
  DimExpr h_out = sym::floordiv(S("h") + 1 + 1 - 1 * (3 - 1) - 1, 2) + 1;
  DimExpr w_out = sym::floordiv(S("w") + 1 + 1 - 1 * (3 - 1) - 1, 2) + 1;
  EXPECT_EQ(dims(t.b.v(y)), dims({S("batch"), 16, h_out, w_out}));
}

TEST(ShapeRulesNn, ConvDepthwiseDilated) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float16, Shape{1, 32, 56, 56});
  ValueId w = t.b.input("w", DType::Float16, Shape{32, 1, 3, 3});
  ValueId y = t.b.node1(OpKind::Conv, {x, w},
                        {{"group", int_attr(32)},
                         {"dilations", ints_attr({2, 2})},
                         {"pads", ints_attr({2, 2, 2, 2})}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[1, 32, 56, 56]");
  EXPECT_EQ(t.b.v(y).dtype, DType::Float16);
}

TEST(ShapeRulesNn, ConvSameUpperIsCeilDiv) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 3, S("h"), 225});
  ValueId w = t.b.input("w", DType::Float, Shape{8, 3, 3, 3});
  ValueId y = t.b.node1(OpKind::Conv, {x, w},
                        {{"auto_pad", string_attr("SAME_UPPER")}, {"strides", ints_attr({2, 2})}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), dims({1, 8, sym::ceildiv(S("h"), 2), 113}));
}

TEST(ShapeRulesNn, ConvUnknownInputRankUsesWeightRank) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, std::nullopt);
  ValueId w = t.b.input("w", DType::Float, Shape{8, 3, 3});
  ValueId y = t.b.node1(OpKind::Conv, {x, w});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[?, 8, ?]");
}

TEST(ShapeRulesNn, ConvTransposeUpsamples) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{S("n"), 16, S("h"), 8});
  ValueId w = t.b.input("w", DType::Float, Shape{16, 4, 4, 4});
  ValueId y = t.b.node1(
      OpKind::ConvTranspose, {x, w},
      {{"strides", ints_attr({2, 2})}, {"pads", ints_attr({1, 1, 1, 1})}, {"group", int_attr(2)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), dims({S("n"), 8, 2 * (S("h") - 1) + 4 - 2, 16}));
}

TEST(ShapeRulesNn, MaxPoolFloorAndCeilMode) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), 64, 112, 112});
  auto floor_out = t.b.node(OpKind::MaxPool, {x}, 2,
                            {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}});
  ValueId ceil_out = t.b.node1(OpKind::MaxPool, {x},
                               {{"kernel_shape", ints_attr({3, 3})},
                                {"strides", ints_attr({2, 2})},
                                {"ceil_mode", int_attr(1)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(floor_out[0])), "[batch, 64, 55, 55]");
  EXPECT_EQ(dims(t.b.v(floor_out[1])), "[batch, 64, 55, 55]");
  EXPECT_EQ(t.b.v(floor_out[1]).dtype, DType::Int64);  // Indices
  EXPECT_EQ(dims(t.b.v(ceil_out)), "[batch, 64, 56, 56]");
}

TEST(ShapeRulesNn, CeilModeDropsWindowStartingInRightPadding) {
  // in 4, kernel 2, stride 2, pads (0, 1): ceil((4+1-2)/2)+1 = 3, but the third window would
  // start at 4, inside the right padding, so there are 2.
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 1, 4});
  ValueId y = t.b.node1(OpKind::AveragePool, {x},
                        {{"kernel_shape", ints_attr({2})},
                         {"strides", ints_attr({2})},
                         {"pads", ints_attr({0, 1})},
                         {"ceil_mode", int_attr(1)}},
                        19);
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[1, 1, 2]");
}

TEST(ShapeRulesNn, PoolSymbolicCeilModeStaysSymbolic) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 8, S("len")});
  ValueId y = t.b.node1(
      OpKind::MaxPool, {x},
      {{"kernel_shape", ints_attr({3})}, {"strides", ints_attr({2})}, {"ceil_mode", int_attr(1)}});
  t.infer();
  // ceil((len - 3)/2) + 1 written as one ceildiv: ceil((len + 0 + min(0, 0 + 2 - 3))/2).
  EXPECT_EQ(dims(t.b.v(y)), dims({1, 8, sym::ceildiv(S("len") - 1, 2)}));
}

TEST(ShapeRulesNn, GlobalPoolAndLayerNorm) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{S("n"), 512, 7, 7});
  ValueId g = t.b.node1(OpKind::GlobalAveragePool, {x});
  ValueId h = t.b.input("h", DType::Float16, Shape{S("batch"), S("seq"), 768});
  ValueId scale = t.b.input("scale", DType::Float16, Shape{768});
  auto ln = t.b.node(OpKind::LayerNormalization, {h, scale}, 3, {{"axis", int_attr(-1)}});
  auto ln1 = t.b.node(OpKind::LayerNormalization, {h, scale}, 3, {{"axis", int_attr(1)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(g)), "[n, 512, 1, 1]");
  EXPECT_EQ(dims(t.b.v(ln[0])), "[batch, seq, 768]");
  EXPECT_EQ(t.b.v(ln[0]).dtype, DType::Float16);
  EXPECT_EQ(dims(t.b.v(ln[1])), "[batch, seq, 1]");
  EXPECT_EQ(t.b.v(ln[1]).dtype, DType::Float);  // stash_type defaults to float
  EXPECT_EQ(dims(t.b.v(ln[2])), "[batch, seq, 1]");
  EXPECT_EQ(dims(t.b.v(ln1[1])), "[batch, 1, 1]");
}

TEST(ShapeRulesNn, BatchNormTrainingOutputs) {
  TestModel t(15);
  ValueId x = t.b.input("x", DType::Float, Shape{S("n"), 32, S("h"), S("w")});
  ValueId c = t.b.input("c", DType::Float, Shape{32});
  auto bn =
      t.b.node(OpKind::BatchNormalization, {x, c, c, c, c}, 3, {{"training_mode", int_attr(1)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(bn[0])), "[n, 32, h, w]");
  EXPECT_EQ(dims(t.b.v(bn[1])), "[32]");
  EXPECT_EQ(dims(t.b.v(bn[2])), "[32]");
}

TEST(ShapeRulesNn, DepthToSpaceAndSpaceToDepth) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 16, S("h"), 5});
  ValueId d2s = t.b.node1(OpKind::DepthToSpace, {x}, {{"blocksize", int_attr(2)}});
  ValueId y = t.b.input("y", DType::Float, Shape{1, 3, 8, 6});
  ValueId s2d = t.b.node1(OpKind::SpaceToDepth, {y}, {{"blocksize", int_attr(2)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(d2s)), dims({1, 4, 2 * S("h"), 10}));
  EXPECT_EQ(dims(t.b.v(s2d)), "[1, 12, 4, 3]");
}

TEST(ShapeRulesNn, RoiAlignAndGridSample) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{2, 256, 50, 50});
  ValueId rois = t.b.input("rois", DType::Float, Shape{S("r"), 4});
  ValueId idx = t.b.input("idx", DType::Int64, Shape{S("r")});
  ValueId ra = t.b.node1(OpKind::RoiAlign, {x, rois, idx},
                         {{"output_height", int_attr(7)}, {"output_width", int_attr(7)}});
  ValueId grid = t.b.input("grid", DType::Float, Shape{2, S("gh"), S("gw"), 2});
  ValueId gs = t.b.node1(OpKind::GridSample, {x, grid}, {}, 16);
  t.infer();
  EXPECT_EQ(dims(t.b.v(ra)), "[r, 256, 7, 7]");
  EXPECT_EQ(dims(t.b.v(gs)), "[2, 256, gh, gw]");
}

TEST(ShapeRulesNn, ConvStrideZeroFails) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 3, 8, 8});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 3, 3, 3});
  t.b.node1(OpKind::Conv, {x, w}, {{"strides", ints_attr({1, 0})}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "Conv_0")) << msg;
  EXPECT_TRUE(contains(msg, "'strides'")) << msg;
}

TEST(ShapeRulesNn, ConvGroupZeroFails) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 3, 8, 8});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 3, 3, 3});
  t.b.node1(OpKind::Conv, {x, w}, {{"group", int_attr(0)}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "Conv_0")) << msg;
  EXPECT_TRUE(contains(msg, "'group'")) << msg;
}

TEST(ShapeRulesNn, ConvNegativePadsFail) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 3, 8, 8});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 3, 3, 3});
  t.b.node1(OpKind::Conv, {x, w}, {{"pads", ints_attr({1, -1, 1, 1})}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "Conv_0")) << msg;
  EXPECT_TRUE(contains(msg, "'pads'")) << msg;
}

TEST(ShapeRulesNn, ConvGroupNotDividingChannelsFails) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 6, 8, 8});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 2, 3, 3});
  t.b.node1(OpKind::Conv, {x, w}, {{"group", int_attr(4)}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "'group'")) << msg;
}

TEST(ShapeRulesNn, ConvWeightRankMismatchFails) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 3, 8, 8});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 3, 3});
  t.b.node1(OpKind::Conv, {x, w});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "rank")) << msg;
}

TEST(ShapeRulesNn, HostileAttributesFailCleanly) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 3, 8, 8});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 3, 3, 3});
  t.b.node1(OpKind::Conv, {x, w},
            {{"dilations", ints_attr({INT64_MAX, 1})}, {"pads", ints_attr({1, 1})}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "'pads'")) << msg;  // wrong length, checked before any arithmetic

  TestModel u;
  x = u.b.input("x", DType::Float, Shape{1, 3, 8, 8});
  w = u.b.input("w", DType::Float, Shape{4, 3, 3, 3});
  u.b.node1(OpKind::Conv, {x, w}, {{"dilations", ints_attr({INT64_MAX, 1})}});
  msg = u.infer_error();
  EXPECT_TRUE(contains(msg, "dilations")) << msg;
}

TEST(ShapeRulesNn, MaxPoolMissingKernelShapeFails) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{1, 3, 8, 8});
  t.b.node1(OpKind::MaxPool, {x});
  EXPECT_TRUE(contains(t.infer_error(), "'kernel_shape'"));
}

// ---- linear algebra ----

TEST(ShapeRulesLinalg, GemmTransB) {
  TestModel t;
  ValueId a = t.b.input("a", DType::Float, Shape{S("batch"), 512});
  ValueId b = t.b.input("b", DType::Float, Shape{1000, 512});
  ValueId c = t.b.input("c", DType::Float, Shape{1000});
  ValueId y = t.b.node1(OpKind::Gemm, {a, b, c}, {{"transB", int_attr(1)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[batch, 1000]");
}

TEST(ShapeRulesLinalg, GemmInnerMismatchFails) {
  TestModel t;
  ValueId a = t.b.input("a", DType::Float, Shape{4, 512});
  ValueId b = t.b.input("b", DType::Float, Shape{1000, 256});
  t.b.node1(OpKind::Gemm, {a, b}, {{"transB", int_attr(1)}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "Gemm_0")) << msg;
}

TEST(ShapeRulesLinalg, MatMulBroadcastsSymbolicBatchDims) {
  TestModel t;
  ValueId a = t.b.input("a", DType::Float, Shape{S("batch"), 1, S("seq"), 64});
  ValueId b = t.b.input("b", DType::Float, Shape{1, S("heads"), 64, S("seq")});
  ValueId y = t.b.node1(OpKind::MatMul, {a, b});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[batch, heads, seq, seq]");
}

TEST(ShapeRulesLinalg, MatMulOneDimensionalOperands) {
  TestModel t;
  ValueId v = t.b.input("v", DType::Float, Shape{S("k")});
  ValueId m = t.b.input("m", DType::Float, Shape{S("batch"), S("k"), 10});
  ValueId n = t.b.input("n", DType::Float, Shape{7, S("k")});
  ValueId vm = t.b.node1(OpKind::MatMul, {v, m});
  ValueId nv = t.b.node1(OpKind::MatMul, {n, v});
  ValueId vv = t.b.node1(OpKind::MatMul, {v, v});
  t.infer();
  EXPECT_EQ(dims(t.b.v(vm)), "[batch, 10]");
  EXPECT_EQ(dims(t.b.v(nv)), "[7]");
  EXPECT_EQ(dims(t.b.v(vv)), "[]");
}

TEST(ShapeRulesLinalg, MatMulInnerMismatchFails) {
  TestModel t;
  ValueId a = t.b.input("a", DType::Float, Shape{2, 3});
  ValueId b = t.b.input("b", DType::Float, Shape{4, 5});
  t.b.node1(OpKind::MatMul, {a, b});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "MatMul_0")) << msg;
  EXPECT_TRUE(contains(msg, "inner")) << msg;
}

TEST(ShapeRulesLinalg, MatMulIntegerAndQLinear) {
  TestModel t;
  ValueId a = t.b.input("a", DType::UInt8, Shape{S("m"), 16});
  ValueId b = t.b.input("b", DType::Int8, Shape{16, 32});
  ValueId s = t.b.input("s", DType::Float, Shape{});
  ValueId zp = t.b.input("zp", DType::Int8, Shape{});
  ValueId mi = t.b.node1(OpKind::MatMulInteger, {a, b});
  ValueId ql = t.b.node1(OpKind::QLinearMatMul, {a, s, zp, b, s, zp, s, zp});
  t.infer();
  EXPECT_EQ(dims(t.b.v(mi)), "[m, 32]");
  EXPECT_EQ(t.b.v(mi).dtype, DType::Int32);
  EXPECT_EQ(dims(t.b.v(ql)), "[m, 32]");
  EXPECT_EQ(t.b.v(ql).dtype, DType::Int8);
}

TEST(ShapeRulesLinalg, EinsumBatchedMatMul) {
  TestModel t;
  ValueId a = t.b.input("a", DType::Float, Shape{S("b"), S("i"), 8});
  ValueId b = t.b.input("b", DType::Float, Shape{S("b"), 8, 5});
  ValueId y = t.b.node1(OpKind::Einsum, {a, b}, {{"equation", string_attr("bij, bjk -> bik")}});
  ValueId imp = t.b.node1(OpKind::Einsum, {a, b}, {{"equation", string_attr("bij,bjk")}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[b, i, 5]");
  EXPECT_EQ(dims(t.b.v(imp)), "[i, 5]");  // implicit: labels used once, sorted
}

TEST(ShapeRulesLinalg, EinsumEllipsisDiagonal) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{S("n"), 3, 4, 4});
  ValueId y = t.b.node1(OpKind::Einsum, {x}, {{"equation", string_attr("...ii->...i")}});
  ValueId tr = t.b.node1(OpKind::Einsum, {x}, {{"equation", string_attr("...ii")}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[n, 3, 4]");
  EXPECT_EQ(dims(t.b.v(tr)), "[n, 3]");  // implicit output of a trace keeps only the ellipsis
}

TEST(ShapeRulesLinalg, EinsumBadEquationFails) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{3, 4});
  t.b.node1(OpKind::Einsum, {x}, {{"equation", string_attr("ij->k")}});
  EXPECT_TRUE(contains(t.infer_error(), "'equation'"));
}

TEST(ShapeRulesLinalg, Det) {
  TestModel t;
  ValueId x = t.b.input("x", DType::Float, Shape{S("n"), 3, 3});
  ValueId y = t.b.node1(OpKind::Det, {x});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[n]");
}

// ---- reductions ----

TEST(ShapeRulesReduce, ReduceMeanAxesAttribute) {
  TestModel t(13);
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), S("seq"), 768});
  ValueId keep = t.b.node1(OpKind::ReduceMean, {x}, {{"axes", ints_attr({-1})}});
  ValueId drop =
      t.b.node1(OpKind::ReduceMean, {x}, {{"axes", ints_attr({1})}, {"keepdims", int_attr(0)}});
  ValueId all = t.b.node1(OpKind::ReduceMean, {x}, {{"keepdims", int_attr(0)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(keep)), "[batch, seq, 1]");
  EXPECT_EQ(dims(t.b.v(drop)), "[batch, 768]");
  EXPECT_EQ(dims(t.b.v(all)), "[]");
}

TEST(ShapeRulesReduce, ReduceSumAxesInputFromOpset13) {
  TestModel t(13);
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), S("seq"), 768});
  ValueId axes = t.b.ints("axes", {1});
  ValueId dyn_axes = t.b.input("dyn_axes", DType::Int64, Shape{1});
  ValueId sum = t.b.node1(OpKind::ReduceSum, {x, axes});
  ValueId dyn = t.b.node1(OpKind::ReduceSum, {x, dyn_axes});
  ValueId dyn_drop = t.b.node1(OpKind::ReduceSum, {x, dyn_axes}, {{"keepdims", int_attr(0)}});
  ValueId noop = t.b.node1(OpKind::ReduceSum, {x}, {{"noop_with_empty_axes", int_attr(1)}});
  // Opset 11 ReduceSum still takes the attribute.
  ValueId old = t.b.node1(OpKind::ReduceSum, {x}, {{"axes", ints_attr({0, 2})}}, 11);
  t.infer();
  EXPECT_EQ(dims(t.b.v(sum)), "[batch, 1, 768]");
  EXPECT_EQ(dims(t.b.v(dyn)), "[?, ?, ?]");
  EXPECT_EQ(dims(t.b.v(dyn_drop)), "[?, ?]");
  EXPECT_EQ(dims(t.b.v(noop)), "[batch, seq, 768]");
  EXPECT_EQ(dims(t.b.v(old)), "[1, seq, 1]");
}

TEST(ShapeRulesReduce, ReduceMaxAxesInputFromOpset18) {
  TestModel t(18);
  ValueId x = t.b.input("x", DType::Float, Shape{2, 3, 4});
  ValueId axes = t.b.ints("axes", {0, -1});
  ValueId y = t.b.node1(OpKind::ReduceMax, {x, axes}, {{"keepdims", int_attr(0)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[3]");
}

TEST(ShapeRulesReduce, ArgMaxIsInt64) {
  TestModel t(13);
  ValueId x = t.b.input("x", DType::Float, Shape{S("n"), 10});
  ValueId y = t.b.node1(OpKind::ArgMax, {x}, {{"axis", int_attr(1)}, {"keepdims", int_attr(0)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[n]");
  EXPECT_EQ(t.b.v(y).dtype, DType::Int64);
}

TEST(ShapeRulesReduce, AxisOutOfRangeFails) {
  TestModel t(13);
  ValueId x = t.b.input("x", DType::Float, Shape{2, 3});
  t.b.node1(OpKind::ReduceMean, {x}, {{"axes", ints_attr({5})}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "ReduceMean_0")) << msg;
  EXPECT_TRUE(contains(msg, "'axes'")) << msg;
}

// ---- recurrent ----

TEST(ShapeRulesRnn, BidirectionalLstm) {
  TestModel t(14);
  ValueId x = t.b.input("x", DType::Float, Shape{S("seq"), S("batch"), 10});
  ValueId w = t.b.input("w", DType::Float, Shape{2, 80, 10});
  ValueId r = t.b.input("r", DType::Float, Shape{2, 80, 20});
  auto out = t.b.node(OpKind::LSTM, {x, w, r}, 3,
                      {{"hidden_size", int_attr(20)}, {"direction", string_attr("bidirectional")}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(out[0])), "[seq, 2, batch, 20]");
  EXPECT_EQ(dims(t.b.v(out[1])), "[2, batch, 20]");
  EXPECT_EQ(dims(t.b.v(out[2])), "[2, batch, 20]");
}

TEST(ShapeRulesRnn, BatchFirstGruHiddenFromR) {
  TestModel t(14);
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), S("seq"), 10});
  ValueId w = t.b.input("w", DType::Float, Shape{1, 48, 10});
  ValueId r = t.b.input("r", DType::Float, Shape{1, 48, 16});
  auto out = t.b.node(OpKind::GRU, {x, w, r}, 2, {{"layout", int_attr(1)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(out[0])), "[batch, seq, 1, 16]");
  EXPECT_EQ(dims(t.b.v(out[1])), "[batch, 1, 16]");
}

TEST(ShapeRulesRnn, BadDirectionFails) {
  TestModel t(14);
  ValueId x = t.b.input("x", DType::Float, Shape{5, 1, 10});
  ValueId w = t.b.input("w", DType::Float, Shape{1, 16, 10});
  ValueId r = t.b.input("r", DType::Float, Shape{1, 16, 16});
  t.b.node(OpKind::RNN, {x, w, r}, 2, {{"direction", string_attr("sideways")}});
  EXPECT_TRUE(contains(t.infer_error(), "'direction'"));
}

// ---- signal, quantisation, misc ----

TEST(ShapeRulesSignal, DftAndStft) {
  TestModel t(17);
  ValueId x = t.b.input("x", DType::Float, Shape{S("b"), S("n"), 1});
  ValueId one_sided = t.b.node1(OpKind::DFT, {x}, {{"onesided", int_attr(1)}});
  ValueId len = t.b.ints("len", {64}, /*as_scalar=*/true);
  ValueId padded = t.b.node1(OpKind::DFT, {x, len});
  ValueId step = t.b.ints("step", {160}, true);
  ValueId window = t.b.input("window", DType::Float, Shape{400});
  ValueId stft = t.b.node1(OpKind::STFT, {x, step, window});
  t.infer();
  EXPECT_EQ(dims(t.b.v(one_sided)), dims({S("b"), sym::floordiv(S("n"), 2) + 1, 2}));
  EXPECT_EQ(dims(t.b.v(padded)), dims({S("b"), 64, 2}));
  EXPECT_EQ(dims(t.b.v(stft)), dims({S("b"), sym::floordiv(S("n") - 400, 160) + 1, 201, 2}));
}

TEST(ShapeRulesSignal, Dft20AxisInput) {
  TestModel t(20);
  ValueId x = t.b.input("x", DType::Float, Shape{2, 10, 12, 2});
  ValueId axis = t.b.ints("axis", {1}, true);
  ValueId y = t.b.node1(OpKind::DFT, {x, kNoValue, axis}, {{"onesided", int_attr(1)}});
  ValueId d = t.b.node1(OpKind::DFT, {x});  // default axis -2
  ValueId h = t.b.node1(OpKind::HannWindow, {t.b.ints("size", {32}, true)});
  // onesided + inverse: the inverse real FFT, 2 (n - 1) real points by default
  ValueId ir = t.b.node1(OpKind::DFT, {x, kNoValue, axis}, {{"onesided", int_attr(1)}, {"inverse", int_attr(1)}});
  ValueId ir7 = t.b.node1(OpKind::DFT, {x, t.b.ints("len7", {7}, true), axis}, {{"onesided", int_attr(1)}, {"inverse", int_attr(1)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(ir)), "[2, 18, 12, 1]");
  EXPECT_EQ(dims(t.b.v(ir7)), "[2, 7, 12, 1]");
  EXPECT_EQ(dims(t.b.v(y)), "[2, 6, 12, 2]");
  EXPECT_EQ(dims(t.b.v(d)), "[2, 10, 12, 2]");
  EXPECT_EQ(dims(t.b.v(h)), "[32]");
  EXPECT_EQ(t.b.v(h).dtype, DType::Float);
}

TEST(ShapeRulesMisc, QuantizeDequantize) {
  TestModel t(13);
  ValueId x = t.b.input("x", DType::Float, Shape{S("n"), 64});
  ValueId scale = t.b.input("scale", DType::Float, Shape{64});
  ValueId zp = t.b.input("zp", DType::Int8, Shape{64});
  ValueId q = t.b.node1(OpKind::QuantizeLinear, {x, scale, zp}, {{"axis", int_attr(1)}});
  ValueId q_default = t.b.node1(OpKind::QuantizeLinear, {x, t.b.input("s", DType::Float, Shape{})});
  ValueId dq = t.b.node1(OpKind::DequantizeLinear, {q, scale, zp}, {{"axis", int_attr(1)}});
  auto dyn = t.b.node(OpKind::DynamicQuantizeLinear, {x}, 3);
  t.infer();
  EXPECT_EQ(dims(t.b.v(q)), "[n, 64]");
  EXPECT_EQ(t.b.v(q).dtype, DType::Int8);
  EXPECT_EQ(t.b.v(q_default).dtype, DType::UInt8);
  EXPECT_EQ(t.b.v(dq).dtype, DType::Float);
  EXPECT_EQ(dims(t.b.v(dyn[1])), "[]");
  EXPECT_EQ(t.b.v(dyn[2]).dtype, DType::UInt8);
}

TEST(ShapeRulesMisc, LossesAndRandom) {
  TestModel t(13);
  ValueId scores = t.b.input("scores", DType::Float, Shape{S("n"), 5, S("d")});
  ValueId target = t.b.input("target", DType::Int64, Shape{S("n"), S("d")});
  ValueId mean = t.b.node1(OpKind::NegativeLogLikelihoodLoss, {scores, target});
  auto none = t.b.node(OpKind::SoftmaxCrossEntropyLoss, {scores, target}, 2,
                       {{"reduction", string_attr("none")}});
  ValueId rnd = t.b.node1(OpKind::RandomNormal, {}, {{"shape", ints_attr({3, 4})}});
  ValueId seq_len =
      t.b.node1(OpKind::SequenceLength, {t.b.input("seq", DType::Float, std::nullopt)});
  t.infer();
  EXPECT_EQ(dims(t.b.v(mean)), "[]");
  EXPECT_EQ(dims(t.b.v(none[0])), "[n, d]");
  EXPECT_EQ(dims(t.b.v(none[1])), "[n, 5, d]");
  EXPECT_EQ(dims(t.b.v(rnd)), "[3, 4]");
  EXPECT_EQ(t.b.v(rnd).dtype, DType::Float);
  EXPECT_EQ(dims(t.b.v(seq_len)), "[]");
  EXPECT_EQ(t.b.v(seq_len).dtype, DType::Int64);
}

// ---- control flow ----

TEST(ShapeRulesControl, IfMergesBranches) {
  TestModel t(17);
  Graph& main = *t.model.graph;
  ValueId cond = t.b.input("cond", DType::Bool, Shape{});
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), 4});
  ValueId w8 = t.b.input("w8", DType::Float, Shape{4, 8});
  ValueId w16 = t.b.input("w16", DType::Float, Shape{4, 16});

  auto make_branch = [&](const char* name, ValueId weight) {
    auto g = std::make_shared<Graph>();
    g->name = name;
    g->parent = &main;
    GraphBuilder gb(g.get());
    ValueId xi = gb.capture("x", x);
    ValueId wi = gb.capture("w", weight);
    ValueId same = gb.node1(OpKind::ReduceMean, {xi}, {{"axes", ints_attr({1})}});
    ValueId differs = gb.node1(OpKind::MatMul, {xi, wi});
    g->outputs = {same, differs};
    return g;
  };
  auto outs = t.b.node(OpKind::If, {cond}, 2,
                       {{"then_branch", graph_attr(make_branch("then", w8))},
                        {"else_branch", graph_attr(make_branch("else", w16))}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(outs[0])), "[batch, 1]");
  const Value& merged = t.b.v(outs[1]);
  ASSERT_TRUE(merged.shape && merged.shape->size() == 2);
  EXPECT_EQ((*merged.shape)[0]->to_string(), "batch");
  ASSERT_TRUE((*merged.shape)[1].has_value());
  auto sym = (*merged.shape)[1]->as_symbol();
  ASSERT_TRUE(sym.has_value()) << dims(merged);
  EXPECT_EQ(sym->rfind("if_", 0), 0u) << *sym;  // data-dependent: 8 or 16
}

TEST(ShapeRulesControl, IfWithConstantConditionTakesOneBranch) {
  TestModel t(17);
  Graph& main = *t.model.graph;
  auto cond_data = std::make_shared<TensorData>();
  cond_data->dtype = DType::Bool;
  cond_data->bytes = {0};
  ValueId cond = main.add_value("cond");
  main.value(cond).dtype = DType::Bool;
  main.value(cond).shape = Shape{};
  main.value(cond).data = cond_data;
  main.value(cond).is_initializer = true;
  ValueId x = t.b.input("x", DType::Float, Shape{S("batch"), 4});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 8});
  auto then_g = std::make_shared<Graph>();
  then_g->name = "then";
  then_g->parent = &main;
  {
    GraphBuilder gb(then_g.get());
    // Invalid for these shapes (inner dims 8 vs 4), but dead: the condition is false.
    ValueId wi = gb.capture("w", w);
    then_g->outputs = {gb.node1(OpKind::MatMul, {wi, wi})};
  }
  auto else_g = std::make_shared<Graph>();
  else_g->name = "else";
  else_g->parent = &main;
  {
    GraphBuilder gb(else_g.get());
    ValueId xi = gb.capture("x", x), wi = gb.capture("w", w);
    else_g->outputs = {gb.node1(OpKind::MatMul, {xi, wi})};
  }
  ValueId y = t.b.node1(OpKind::If, {cond},
                        {{"then_branch", graph_attr(then_g)}, {"else_branch", graph_attr(else_g)}});
  t.infer();
  EXPECT_EQ(dims(t.b.v(y)), "[batch, 8]");
}

TEST(ShapeRulesControl, LoopCarriedAndScanOutputs) {
  TestModel t(17);
  Graph& main = *t.model.graph;
  ValueId trip = t.b.ints("trip", {5}, /*as_scalar=*/true);
  ValueId h0 = t.b.input("h0", DType::Float, Shape{S("batch"), 4});
  ValueId w = t.b.input("w", DType::Float, Shape{4, 4});
  ValueId m0 = t.b.input("m0", DType::Float, Shape{2, 3});

  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->parent = &main;
  GraphBuilder gb(body.get());
  ValueId iter = gb.input("iter", DType::Undefined, std::nullopt);
  ValueId cond_in = gb.input("cond_in", DType::Undefined, std::nullopt);
  ValueId h_in = gb.input("h_in", DType::Undefined, std::nullopt);
  ValueId m_in = gb.input("m_in", DType::Undefined, std::nullopt);
  ValueId wi = gb.capture("w", w);
  ValueId h_out = gb.node1(OpKind::MatMul, {h_in, wi});  // same shape
  ValueId m_out = gb.node1(OpKind::Einsum, {m_in}, {{"equation", string_attr("ij->ji")}});  // flips
  ValueId row = gb.node1(OpKind::ReduceSum, {h_out},
                         {{"keepdims", int_attr(0)}, {"noop_with_empty_axes", int_attr(0)}});
  body->outputs = {cond_in, h_out, m_out, h_out, row};
  (void)iter;

  auto outs = t.b.node(OpKind::Loop, {trip, kNoValue, h0, m0}, 4, {{"body", graph_attr(body)}});
  t.infer();
  EXPECT_EQ(dims(gb.v(iter)), "[]");
  EXPECT_EQ(gb.v(iter).dtype, DType::Int64);
  EXPECT_EQ(gb.v(cond_in).dtype, DType::Bool);
  EXPECT_EQ(dims(gb.v(h_in)), "[batch, 4]");
  EXPECT_EQ(dims(gb.v(m_in)), "[?, ?]");  // transposed every iteration: widened to unknown
  EXPECT_EQ(dims(t.b.v(outs[0])), "[batch, 4]");
  const Value& m_final = t.b.v(outs[1]);
  ASSERT_TRUE(m_final.shape && m_final.shape->size() == 2) << dims(m_final);
  for (const Dim& d : *m_final.shape) {
    ASSERT_TRUE(d && d->as_symbol()) << dims(m_final);
    EXPECT_EQ(d->as_symbol()->rfind("loop_", 0), 0u);
  }
  EXPECT_EQ(dims(t.b.v(outs[2])), "[5, batch, 4]");  // scan output stacked M times
  EXPECT_EQ(dims(t.b.v(outs[3])), "[5]");
}

TEST(ShapeRulesControl, LoopWithConditionHasDataDependentTripCount) {
  TestModel t(17);
  Graph& main = *t.model.graph;
  ValueId trip = t.b.ints("trip", {5}, true);
  ValueId cond = t.b.input("cond", DType::Bool, Shape{});
  ValueId x = t.b.input("x", DType::Float, Shape{3});
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->parent = &main;
  GraphBuilder gb(body.get());
  gb.input("iter", DType::Undefined, std::nullopt);
  ValueId cond_in = gb.input("cond_in", DType::Undefined, std::nullopt);
  ValueId xi = gb.capture("x", x);
  body->outputs = {cond_in, gb.node1(OpKind::MatMul, {xi, xi})};
  ValueId y = t.b.node1(OpKind::Loop, {trip, cond}, {{"body", graph_attr(body)}});
  t.infer();
  const Value& v = t.b.v(y);
  ASSERT_TRUE(v.shape && v.shape->size() == 1) << dims(v);
  ASSERT_TRUE((*v.shape)[0] && (*v.shape)[0]->as_symbol());
  EXPECT_EQ((*v.shape)[0]->as_symbol()->rfind("loop_", 0), 0u);
}

TEST(ShapeRulesControl, ScanOverSequenceAxis) {
  TestModel t(16);
  Graph& main = *t.model.graph;
  ValueId s0 = t.b.input("s0", DType::Float, Shape{S("batch"), 8});
  ValueId xs = t.b.input("xs", DType::Float, Shape{S("batch"), S("seq"), 8});
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->parent = &main;
  GraphBuilder gb(body.get());
  ValueId s_in = gb.input("s_in", DType::Undefined, std::nullopt);
  ValueId x_in = gb.input("x_in", DType::Undefined, std::nullopt);
  ValueId red = gb.node1(OpKind::ReduceMean, {x_in}, {{"axes", ints_attr({1})}});
  body->outputs = {s_in, red};
  auto outs = t.b.node(OpKind::Scan, {s0, xs}, 2,
                       {{"body", graph_attr(body)},
                        {"num_scan_inputs", int_attr(1)},
                        {"scan_input_axes", ints_attr({1})},
                        {"scan_output_axes", ints_attr({-1})}});
  t.infer();
  EXPECT_EQ(dims(gb.v(x_in)), "[batch, 8]");
  EXPECT_EQ(dims(t.b.v(outs[0])), "[batch, 8]");
  EXPECT_EQ(dims(t.b.v(outs[1])), "[batch, 1, seq]");
}

TEST(ShapeRulesControl, LoopBodyArityMismatchFails) {
  TestModel t(17);
  Graph& main = *t.model.graph;
  ValueId x = t.b.input("x", DType::Float, Shape{3});
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->parent = &main;
  GraphBuilder gb(body.get());
  ValueId it = gb.input("iter", DType::Undefined, std::nullopt);
  body->outputs = {it};
  t.b.node1(OpKind::Loop, {kNoValue, kNoValue, x}, {{"body", graph_attr(body)}});
  std::string msg = t.infer_error();
  EXPECT_TRUE(contains(msg, "Loop_0")) << msg;
  EXPECT_TRUE(contains(msg, "'body'")) << msg;
}

}  // namespace
}  // namespace cuvil
