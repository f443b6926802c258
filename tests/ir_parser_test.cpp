// Parser: text IR -> Model -> text is the identity, parsed models verify, and bad text gives a
// "line:column: message" error without crashing.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "frontend/onnx_import.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/infer_shapes.h"

namespace cuvil {
namespace {

// Parses, verifies and reprints; the reprint must be the input.
void expect_round_trip(const std::string& text) {
  std::string error;
  std::optional<Model> m = parse_model(text, &error);
  ASSERT_TRUE(m) << error;
  verify_model(*m);
  EXPECT_EQ(model_to_string(*m), text);
}

// Parsing must fail with an error at `line` that mentions `needle`.
void expect_error(const std::string& text, int line, const std::string& needle) {
  std::string error;
  std::optional<Model> m = parse_model(text, &error);
  ASSERT_FALSE(m) << "parsed:\n" << text;
  EXPECT_EQ(error.rfind(std::to_string(line) + ":", 0), 0u) << error;
  EXPECT_NE(error.find(needle), std::string::npos) << error;
}

// ---- golden text round trips ----------------------------------------------------------------

TEST(IrParser, RoundTripsModelHeaderConstantsAndNodes) {
  expect_round_trip(R"IR(model {
  ir_version = 8
  opset "" = 13
  opset "com.microsoft" = 1
  producer = "pytorch 2.1.0"
  inlined_function "local::Gelu"
  dim "N + 1" = 2:
  dim batch = 1:64
  dim seq = 0:
}
graph main(%x: f32[batch, 3, 224, 224], %ids: i64[batch, seq]) -> (%y, %s, %onnx::Gather_5) {
  %w: f32[64, 3, 7, 7] = const elided<37632>
  %c: i64[2] = const [12, -3]
  %u: u64[1] = const [18446744073709551615]
  %h: f16[2] = const 0x003c0040
  %q: i4[3] = const 0x2107
  %b: bool[3] = const [true, false, true]
  %f: f32[3] = const [1.5, -0.0, 1.00000001e-07]
  %d: f64[2] = const [0.10000000000000001, inf]
  %names: str[2] = const ["a", "b\"c\x0a"]
  %empty: i32[0] = const []
  %y: f32[batch, 64, 112, 112] = Conv<13>(%x, %w, _) {dilations = ints[1, 1], group = 1, pads = ints[3, 3, 3, 3]} @"/conv1/Conv"
  %s: i64[2] {batch, seq} = Shape<13>(%ids) @"/Shape"
  %onnx::Gather_5: i64[] {seq} = Gather<13>(%s, %c) {axis = 0} @"/Gather"
}
)IR");
}

TEST(IrParser, RoundTripsQuotedNamesDomainsPlaceholdersAndTypes) {
  expect_round_trip(R"IR(model {
  ir_version = 0
}
graph "my graph"(%"input 0": f32[n, floordiv(n, 2) + 1, ?], %opt: opt<f32[*]>, %"a]b": ?[*]) -> (%a, %"b:") {
  %a: f32[*], _, %"b:": ?[*] = "com.microsoft"::Attention<1>(%"input 0", _, %opt) {alpha = 0.125f, eps = -inff, mode = "causal", num_heads = 4, t = tensor<i32[2]> [1, 2]} @"attn \"0\""
  %sq: seq<f32> = SequenceEmpty<11>() {dtype = 1} @"se"
  %m: map, %sp: sparse, %unk: unknown = "my op"<1>(%"a]b") @""
  %k: i64[max(n, 4), 2*n - 1] {"min", n} = "ai.onnx"::Unknown_Op<7>(%"input 0") {floats = floats[0.5, nan], tensors = tensors[tensor<str[1]> ["z"], tensor<f16[1]> 0x003c], "weird key" = strings["x", ""]} @"odd"
  = Print<1>(%a) @"print"
}
)IR");
}

TEST(IrParser, RoundTripsSubgraphsWithCaptures) {
  expect_round_trip(R"IR(model {
  ir_version = 9
  opset "" = 17
}
graph main(%cond: bool[], %x: f32[2]) -> (%r, %z) {
  %y: f32[2] = Relu<14>(%x) @"relu"
  %r: f32[2] = If<13>(%cond) {else_branch = 
    graph else_body() -> (%o) {
      %y: f32[2] = capture
      %o: f32[2] = Neg<13>(%y) @"neg"
    }, then_branch = 
    graph then_body() -> (%y) {
      %y: f32[2] = capture
    }} @"if"
  %z: f32[2] = Switch<1>(%x) {branches = graphs[
    graph b0(%i: i64[]) -> (%o) {
      %x: f32[2] = capture
      %cond: bool[] = capture
      %o: f32[2] = If<13>(%cond) {else_branch = 
        graph inner_else() -> (%x) {
          %x: f32[2] = capture
        }, then_branch = 
        graph inner_then() -> (%k) {
          %k: f32[2] = const [1.0, 2.0]
        }} @"inner_if"
    },
    graph b1() -> (%x) {
      %x: f32[2] = capture
    }], empty = graphs[]} @"switch"
}
)IR");
}

TEST(IrParser, RoundTripsEveryAttributeKind) {
  expect_round_trip(R"IR(model {
  ir_version = 0
}
graph g() -> () {
  = Custom<1>() {f = 0.5f, fs = floats[], i = -7, is = ints[], s = "", sp = sparse_tensor["values { }"], sps = sparse_tensors["a", "b"], ss = strings[], t = tensor<bool[2]> [true, false], ts = tensors[], ty = type["tensor_type { elem_type: 1 }"], tys = types[]} @"all"
}
)IR");
}

TEST(IrParser, DocsExampleRoundTrips) {
  std::ifstream in(std::string(CUVIL_SOURCE_DIR) + "/docs/ir.md");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const size_t begin = doc.find("```\n");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```\n", begin + 4);
  ASSERT_NE(end, std::string::npos);
  expect_round_trip(doc.substr(begin + 4, end - begin - 4));
}

// ---- what parsing builds ----------------------------------------------------------------------

TEST(IrParser, BuildsCapturesNodesAndConstants) {
  std::string error;
  std::optional<Model> m = parse_model(R"IR(
// Hand-written: no model block, a comment, nodes without names.
graph main(%c: bool[], %x: f32[2]) -> (%r) {
  %w: f32[4, 5] = const elided<80>
  %r: f32[2] = If<13>(%c) {else_branch = graph e() -> (%x) { %x: f32[2] = capture }, then_branch = graph t() -> (%n) { %x: f32[2] = capture  %n: f32[2] = Neg<13>(%x) }}
}
)IR", &error);
  ASSERT_TRUE(m) << error;
  verify_model(*m);
  const Graph& g = *m->graph;
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& n = g.nodes[0];
  EXPECT_EQ(n.op, OpKind::If);
  EXPECT_EQ(n.name, "If_0");
  const Graph& then_g = *n.attr("then_branch")->g;
  EXPECT_EQ(then_g.parent, &g);
  ASSERT_EQ(then_g.captures.size(), 1u);
  EXPECT_EQ(then_g.value(then_g.captures[0]).outer, g.find("x"));
  EXPECT_EQ(then_g.nodes.at(0).name, "Neg_0");
  EXPECT_EQ(then_g.nodes.at(0).op, OpKind::Neg);

  // Elided constants come back as zeros of the right dtype and dims.
  const Value& w = g.value(g.find("w"));
  ASSERT_TRUE(w.is_initializer && w.data);
  EXPECT_EQ(w.data->dtype, DType::Float);
  EXPECT_EQ(w.data->dims, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(w.data->bytes, std::vector<uint8_t>(80, 0));
  EXPECT_EQ(w.producer, -1);
  EXPECT_EQ(g.value(g.find("r")).producer, 0);
}

TEST(IrParser, UnknownOpsAndDomainsParse) {
  std::string error;
  std::optional<Model> m = parse_model(
      "graph g(%a: f32[1]) -> (%b) {\n  %b: f32[1] = \"com.example\"::Frob<2>(%a) @\"f\"\n}\n", &error);
  ASSERT_TRUE(m) << error;
  const Node& n = m->graph->nodes.at(0);
  EXPECT_EQ(n.op, OpKind::Unknown);
  EXPECT_EQ(n.domain, "com.example");
  EXPECT_EQ(n.op_type, "Frob");
  EXPECT_EQ(n.opset, 2);
}

// ---- a model built in C++ -----------------------------------------------------------------------

ValueId add_tensor(Graph& g, const std::string& name, DType dtype, Shape shape) {
  ValueId id = g.add_value(name);
  g.value(id).dtype = dtype;
  g.value(id).shape = std::move(shape);
  return id;
}

std::shared_ptr<const TensorData> tensor(DType dtype, std::vector<int64_t> dims,
                                         std::vector<uint8_t> bytes) {
  auto t = std::make_shared<TensorData>();
  t->dtype = dtype;
  t->dims = std::move(dims);
  t->bytes = std::move(bytes);
  return t;
}

template <typename T>
std::vector<uint8_t> bytes_of(std::initializer_list<T> values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

ValueId add_const(Graph& g, const std::string& name, std::shared_ptr<const TensorData> t) {
  Shape shape;
  for (int64_t d : t->dims) shape.emplace_back(DimExpr(d));
  ValueId id = add_tensor(g, name, t->dtype, shape);
  g.value(id).is_initializer = true;
  g.value(id).data = std::move(t);
  return id;
}

ValueId add_capture(Graph& sub, const Graph& parent, const std::string& name) {
  ValueId outer = parent.find(name);
  const Value& o = parent.value(outer);
  ValueId id = add_tensor(sub, name, o.dtype, *o.shape);
  sub.value(id).outer = outer;
  sub.value(id).sym_data = o.sym_data;
  sub.captures.push_back(id);
  return id;
}

Node& add_node(Graph& g, const std::string& op_type, const std::string& domain,
               std::vector<ValueId> inputs, std::vector<ValueId> outputs, const std::string& name) {
  Node n;
  n.op_type = op_type;
  n.domain = domain;
  n.op = op_from_name(domain, op_type).value_or(OpKind::Unknown);
  n.opset = domain.empty() ? 17 : 1;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.name = name;
  for (ValueId out : n.outputs)
    if (out != kNoValue) g.value(out).producer = static_cast<int32_t>(g.nodes.size());
  g.nodes.push_back(std::move(n));
  return g.nodes.back();
}

std::shared_ptr<Graph> subgraph(Graph& parent, const std::string& name) {
  auto sub = std::make_shared<Graph>();
  sub->name = name;
  sub->parent = &parent;
  return sub;
}

Attribute attr_of(Attribute::Kind kind) {
  Attribute a;
  a.kind = kind;
  return a;
}

Model build_model() {
  using K = Attribute::Kind;
  const DimExpr batch = DimExpr::symbol("batch"), seq = DimExpr::symbol("seq");
  Model m;
  m.ir_version = 9;
  m.opset_imports = {{"", 17}, {"com.example", 1}};
  m.producer_name = "cuvil-test";
  m.producer_version = "0.1";
  m.local_functions = {"local::Gelu"};
  m.ranges.set("batch", {1, 64});
  m.ranges.set("seq", {0, sym::Range::kUnbounded});
  m.graph = std::make_shared<Graph>();
  Graph& g = *m.graph;
  g.name = "main";
  ValueId x = add_tensor(g, "x", DType::Float, {batch, seq, DimExpr(8)});
  ValueId cond = add_tensor(g, "cond", DType::Bool, {});
  g.inputs = {x, cond};

  std::vector<uint8_t> big(8 * 8 * 4);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  ValueId w = add_const(g, "weight 0", tensor(DType::Float, {8, 8}, big));
  ValueId idx = add_const(g, "onnx::idx:", tensor(DType::Int64, {2}, bytes_of<int64_t>({1, -1})));
  add_const(g, "u", tensor(DType::UInt64, {1}, bytes_of<uint64_t>({UINT64_MAX})));
  add_const(g, "nibbles", tensor(DType::Int4, {3}, {0x21, 0x07}));
  add_const(g, "half", tensor(DType::Float16, {2}, {0x00, 0x3c, 0x00, 0xc0}));
  add_const(g, "dbl", tensor(DType::Double, {2}, bytes_of<double>({0.1, -2.5})));
  add_const(g, "flags", tensor(DType::Bool, {2}, {1, 0}));
  auto strs = std::make_shared<TensorData>();
  strs->dtype = DType::String;
  strs->dims = {2};
  strs->strings = {"tab\there", "quote\"back\\slash"};
  add_const(g, "strs", strs);

  ValueId s = add_tensor(g, "shape", DType::Int64, {DimExpr(3)});
  g.value(s).sym_data = std::vector<DimExpr>{batch, seq, DimExpr(8)};
  add_node(g, "Shape", "", {x}, {s}, "/Shape");
  ValueId y = add_tensor(g, "y", DType::Float, {batch, seq, DimExpr(8)});
  add_node(g, "MatMul", "", {x, w}, {y}, "/MatMul \"0\"");
  ValueId half_seq = add_tensor(g, "half:seq", DType::Float, {sym::floordiv(seq, 2) + 1, std::nullopt});

  // If with two branches capturing y and x.
  ValueId r = add_tensor(g, "r", DType::Float, {batch, seq, DimExpr(8)});
  {
    auto then_g = subgraph(g, "then");
    ValueId cy = add_capture(*then_g, g, "y");
    then_g->outputs = {cy};
    auto else_g = subgraph(g, "else");
    ValueId cx = add_capture(*else_g, g, "x");
    ValueId neg = add_tensor(*else_g, "neg", DType::Float, {batch, seq, DimExpr(8)});
    add_node(*else_g, "Neg", "", {cx}, {neg}, "neg");
    else_g->outputs = {neg};
    Node& n = add_node(g, "If", "", {cond}, {r}, "if");
    n.attrs["then_branch"] = attr_of(K::Graph);
    n.attrs["then_branch"].g = then_g;
    n.attrs["else_branch"] = attr_of(K::Graph);
    n.attrs["else_branch"].g = else_g;
  }

  // One node with every attribute kind; its graph attribute nests a capture chain.
  ValueId a = add_tensor(g, "a", DType::Float, {});
  ValueId b = add_tensor(g, "b", DType::Undefined, {});
  g.value(a).shape.reset();  // rank unknown
  g.value(b).shape.reset();
  {
    Node n;
    auto set = [&](const std::string& key, Attribute attr) { n.attrs[key] = std::move(attr); };
    Attribute f = attr_of(K::Float);
    f.f = 0.1f;
    set("f", f);
    Attribute i = attr_of(K::Int);
    i.i = std::numeric_limits<int64_t>::min();
    set("i", i);
    Attribute str = attr_of(K::String);
    str.s = "line\nbreak \"q\"";
    set("s", str);
    Attribute t = attr_of(K::Tensor);
    t.t = tensor(DType::Float, {2}, bytes_of<float>({1.0f, 2.5f}));
    set("t", t);
    Attribute sp = attr_of(K::SparseTensor);
    sp.strings = {"values { dims: 1 }"};
    set("sparse", sp);
    Attribute ty = attr_of(K::TypeProto);
    ty.strings = {"tensor_type { elem_type: 1 }"};
    set("type", ty);
    Attribute fs = attr_of(K::Floats);
    fs.floats = {1.0f, -0.5f, std::numeric_limits<float>::infinity()};
    set("floats", fs);
    Attribute is = attr_of(K::Ints);
    is.ints = {1, 2, 3};
    set("ints", is);
    Attribute ss = attr_of(K::Strings);
    ss.strings = {"a", "b c"};
    set("strings", ss);
    Attribute ts = attr_of(K::Tensors);
    ts.tensors = {tensor(DType::Int64, {1}, bytes_of<int64_t>({5})), strs};
    set("tensors", ts);
    Attribute sps = attr_of(K::SparseTensors);
    sps.strings = {"a", "b"};
    set("sparse_tensors", sps);
    Attribute tys = attr_of(K::TypeProtos);
    tys.strings = {"t1"};
    set("types", tys);
    Attribute key = attr_of(K::Int);
    key.i = 1;
    set("weird key:", key);

    // graph attribute: body(%i) captures y; an inner Loop body captures the body's capture.
    auto body = subgraph(g, "body");
    ValueId bi = add_tensor(*body, "i", DType::Int64, {});
    body->inputs = {bi};
    ValueId by = add_capture(*body, g, "y");
    add_capture(*body, g, "shape");
    ValueId bo = add_tensor(*body, "o", DType::Float, {batch, seq, DimExpr(8)});
    {
      auto inner = subgraph(*body, "inner");
      ValueId iy = add_capture(*inner, *body, "y");
      inner->outputs = {iy};
      Node& inner_loop = add_node(*body, "Loop", "", {kNoValue, kNoValue, by}, {bo}, "inner loop");
      inner_loop.attrs["body"] = attr_of(K::Graph);
      inner_loop.attrs["body"].g = inner;
    }
    body->outputs = {bo};
    Attribute ga = attr_of(K::Graph);
    ga.g = body;
    set("g", ga);
    Attribute gs = attr_of(K::Graphs);
    for (const char* name : {"g0", "g1"}) {
      auto sg = subgraph(g, name);
      ValueId c = add_capture(*sg, g, "cond");
      sg->outputs = {c};
      gs.graphs.push_back(sg);
    }
    set("graphs", gs);

    n.op_type = "Custom";
    n.domain = "com.example";
    n.opset = 1;
    n.name = "everything";
    n.inputs = {y, kNoValue, idx};
    n.outputs = {a, kNoValue, b};
    g.value(a).producer = g.value(b).producer = static_cast<int32_t>(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }
  add_node(g, "Relu", "", {y}, {half_seq}, "relu");
  add_node(g, "Print", "com.example", {a}, {}, "print");
  g.outputs = {r, a, half_seq};
  return m;
}

TEST(IrParser, RoundTripsModelBuiltInCpp) {
  Model m = build_model();
  verify_model(m);
  const std::string text = model_to_string(m);
  std::string error;
  std::optional<Model> parsed = parse_model(text, &error);
  ASSERT_TRUE(parsed) << error << "\n" << text;
  verify_model(*parsed);
  EXPECT_EQ(model_to_string(*parsed), text);

  // Structure: captures resolve to the same-named outer value; ops and names survive.
  const Graph& g = *parsed->graph;
  EXPECT_EQ(parsed->producer_name, "cuvil-test");
  EXPECT_EQ(parsed->producer_version, "0.1");
  EXPECT_EQ(parsed->ranges.get("batch").hi, 64);
  const Node& everything = g.nodes.at(3);
  EXPECT_EQ(everything.name, "everything");
  EXPECT_EQ(everything.outputs.at(1), kNoValue);
  EXPECT_EQ(everything.inputs.at(1), kNoValue);
  ASSERT_EQ(everything.attrs.size(), m.graph->nodes.at(3).attrs.size());
  for (const auto& [key, attr] : m.graph->nodes.at(3).attrs)
    EXPECT_EQ(everything.attr(key)->kind, attr.kind) << key;
  EXPECT_EQ(everything.attr("i")->i, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(everything.attr("s")->s, "line\nbreak \"q\"");
  const Graph& body = *everything.attr("g")->g;
  EXPECT_EQ(body.parent, &g);
  EXPECT_EQ(body.value(body.captures.at(0)).outer, g.find("y"));
  const Graph& inner = *body.nodes.at(0).attr("body")->g;
  EXPECT_EQ(inner.parent, &body);
  EXPECT_EQ(inner.value(inner.captures.at(0)).outer, body.find("y"));
  EXPECT_EQ(body.value(body.find("shape")).sym_data, g.value(g.find("shape")).sym_data);
  EXPECT_EQ(g.value(g.find("half:seq")).shape, m.graph->value(m.graph->find("half:seq")).shape);
  EXPECT_EQ(g.nodes.at(1).op, OpKind::MatMul);
  EXPECT_EQ(g.nodes.at(1).name, "/MatMul \"0\"");
}

TEST(IrParser, ConstantsPrintedInFullParseBackBitExact) {
  Model m = build_model();
  PrintOptions full;
  full.inline_limit = std::numeric_limits<size_t>::max();
  const std::string text = model_to_string(m, full);
  std::string error;
  std::optional<Model> parsed = parse_model(text, &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(model_to_string(*parsed, full), text);
  for (const Value& v : m.graph->values) {
    if (!v.is_initializer) continue;
    const Value& p = parsed->graph->value(parsed->graph->find(v.name));
    ASSERT_TRUE(p.data) << v.name;
    EXPECT_EQ(p.data->dtype, v.data->dtype) << v.name;
    EXPECT_EQ(p.data->dims, v.data->dims) << v.name;
    EXPECT_EQ(p.data->bytes, v.data->bytes) << v.name;
    EXPECT_EQ(p.data->strings, v.data->strings) << v.name;
  }
}

// ---- errors ---------------------------------------------------------------------------------

TEST(IrParser, ErrorUnknownValueReference) {
  expect_error("graph g(%x: f32[2]) -> (%y) {\n  %y: f32[2] = Relu<14>(%x)\n  %z: f32[2] = Relu<14>(%w)\n}\n",
               3, "unknown value '%w'");
  expect_error("graph g(%x: f32[2]) -> (%nope) {\n}\n", 1, "unknown value '%nope'");
  // A node cannot read its own output.
  expect_error("graph g() -> () {\n  %y: f32[2] = Relu<14>(%y)\n}\n", 2, "unknown value '%y'");
}

TEST(IrParser, ErrorBadDtype) {
  expect_error("graph g(%x: f33[2]) -> () {\n}\n", 1, "unknown dtype 'f33'");
  expect_error("graph g() -> () {\n  %c: f32[1] = const tensor\n}\n", 2, "expected '['");
}

TEST(IrParser, ErrorUnterminatedString) {
  expect_error("graph g(%x: f32[2]) -> (%y) {\n  %y: f32[2] = Relu<14>(%x) @\"relu\n}\n", 2,
               "unterminated string");
  expect_error("graph g() -> () {\n  = Foo<1>() {s = \"abc\\q\"} @\"n\"\n}\n", 2, "invalid escape");
}

TEST(IrParser, ErrorGarbage) {
  expect_error("hello world", 1, "expected 'graph'");
  expect_error("", 1, "expected 'graph'");
  expect_error("model {\n  ir_version = 1\n  colour = 3\n}\n", 3, "unknown model field 'colour'");
  expect_error("graph g() -> () {\n}\ntrailing", 3, "unexpected text");
  expect_error("graph g() -> () {\n  %a: f32[2] = Relu<14>(\n", 3, "expected a value");
  expect_error("graph g() -> () {\n", 2, "not closed");
  expect_error("graph g() -> () {\n  %a: f32[2 = Relu<14>()\n}\n", 2, "unterminated dimension list");
  expect_error("graph g() -> () {\n  %a: f32[2 +] = Relu<14>()\n}\n", 2, "bad dimension expression");
  expect_error("graph g() -> () {\n  %a: f32[99999999999 * 99999999999] = Relu<14>()\n}\n", 2,
               "bad dimension expression");
}

TEST(IrParser, ErrorDefinitionsAndCaptures) {
  expect_error("graph g(%x: f32[2]) -> () {\n  %x: f32[2] = const [1.0, 2.0]\n}\n", 2,
               "defined twice");
  expect_error("graph g() -> () {\n  %x: f32[2] = capture\n}\n", 2, "in the main graph");
  expect_error(
      "graph g(%c: bool[]) -> () {\n  = If<13>(%c) {then_branch = graph t() -> () {\n"
      "    %missing: f32[2] = capture\n  }} @\"if\"\n}\n",
      3, "names no value of the enclosing graph 'g'");
  expect_error("graph g() -> () {\n  = Foo<1>() {a = 1, a = 2}\n}\n", 2, "given twice");
}

TEST(IrParser, ErrorConstantsThatDoNotFit) {
  expect_error("graph g() -> () {\n  %c: i64[2] = const [1]\n}\n", 2,
               "constant i64[2] needs 2 elements, got 1");
  expect_error("graph g() -> () {\n  %c: i8[1] = const [300]\n}\n", 2, "out of range for i8");
  expect_error("graph g() -> () {\n  %c: f32[2] = const elided<4>\n}\n", 2, "does not match");
  expect_error("graph g() -> () {\n  %c: f16[1] = const 0x00\n}\n", 2, "needs 2 bytes, got 1");
  expect_error("graph g() -> () {\n  %c: f32[n] = const [1.0]\n}\n", 2, "non-negative integers");
  expect_error("graph g() -> () {\n  %c: f16[1] = const [1.0]\n}\n", 2, "written in hex");
  expect_error("graph g() -> () {\n  %c: bool[1] = const [yes]\n}\n", 2, "expected true or false");
  // The elided-bytes cap stops hostile sizes before anything is allocated.
  expect_error("graph g() -> () {\n  %c: u8[1000000000000000] = const elided<1000000000000000>\n}\n",
               2, "exceed the limit");
  ParseOptions small;
  small.max_elided_bytes = 100;
  std::string error;
  EXPECT_FALSE(parse_model("graph g() -> () {\n  %a: u8[80] = const elided<80>\n"
                           "  %b: u8[80] = const elided<80>\n}\n",
                           &error, small));
  EXPECT_EQ(error.rfind("3:", 0), 0u) << error;
}

TEST(IrParser, DeepNestingIsAnErrorNotACrash) {
  std::string text = "graph g(%c: bool[]) -> () {\n";
  for (int i = 0; i < 200; ++i) text += "= If<13>(%c) {b = graph s() -> () {\n%c: bool[] = capture\n";
  std::string error;
  EXPECT_FALSE(parse_model(text, &error));
  EXPECT_NE(error.find("nest deeper"), std::string::npos) << error;

  const std::string parens(100000, '(');
  EXPECT_FALSE(parse_model("graph g(%x: f32[" + parens + "]) -> () {\n}\n", &error));
  EXPECT_EQ(error.rfind("1:", 0), 0u) << error;
}

TEST(IrParser, PrefixesAndMutationsNeverCrash) {
  const std::string text = model_to_string(build_model());
  std::string error;
  for (size_t n = 0; n < text.size(); ++n) {
    // Some prefixes end inside trailing whitespace of a complete model; all others fail.
    std::optional<Model> m = parse_model(text.substr(0, n), &error);
    if (m) verify_model(*m);
    else EXPECT_NE(error.find(':'), std::string::npos);
  }
  std::mt19937 rng(1234);
  const char kBytes[] = "%\"\\{}[]()<>,:=_@ -0x9aZ\n";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string mutated = text;
    for (int k = 0; k < 3; ++k)
      mutated[rng() % mutated.size()] = kBytes[rng() % (sizeof kBytes - 1)];
    std::optional<Model> m = parse_model(mutated, &error);
    if (m) verify_model(*m);
  }
}

// ---- the exported test models ----------------------------------------------------------------

void expect_model_file_round_trip(const std::string& rel) {
  Model m = frontend::import_onnx_file(std::string(CUVIL_SOURCE_DIR) + "/" + rel);
  infer_shapes(m);
  const std::string text = model_to_string(m);
  std::string error;
  std::optional<Model> parsed = parse_model(text, &error);
  ASSERT_TRUE(parsed) << rel << ": " << error;
  verify_model(*parsed);
  EXPECT_EQ(model_to_string(*parsed), text) << rel;
}

TEST(IrParser, RoundTripsBertTiny) { expect_model_file_round_trip("testdata/models/bert_tiny.onnx"); }

TEST(IrParser, RoundTripsResnet18) { expect_model_file_round_trip("testdata/models/resnet18.onnx"); }

}  // namespace
}  // namespace cuvil
