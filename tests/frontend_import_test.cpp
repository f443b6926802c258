// What the ONNX frontend must accept and how it maps onto the IR: every TensorProto data type
// (raw and typed) with the right bytes, every attribute kind, If/Loop/Scan bodies with
// explicit captures of outer values, model-local functions inlined with attribute references
// resolved, opset versions per node, and the --dim option.
#include <gtest/gtest.h>

#include <cstring>

#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "onnx_builder.h"

namespace cuvil {
namespace {

using test::FailsWith;
using test::TempDir;
using Tp = onnx::TensorProto;

class FrontendImport : public ::testing::Test {
 protected:
  Model import(const onnx::ModelProto& m, const frontend::ImportOptions& options = {}) {
    Model model = frontend::import_onnx_file(test::write_model(tmp_.path(), m), options);
    verify_model(model);
    return model;
  }

  // A model whose only initializer is `t`, read by an Identity.
  Model import_initializer(const Tp& t) {
    onnx::ModelProto m = test::make_model();
    auto* g = m.mutable_graph();
    *g->add_initializer() = t;
    test::add_node(g, "Identity", {t.name()}, {"y"}, "identity");
    test::add_output(g, "y");
    return import(m);
  }

  static const Node& node_named(const Graph& g, const std::string& name) {
    for (const Node& n : g.nodes)
      if (n.name == name) return n;
    throw std::runtime_error("no node '" + name + "' in graph '" + g.name + "'");
  }

  TempDir tmp_;
};

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::string s = test::raw_of(values);
  return std::vector<uint8_t>(s.begin(), s.end());
}

struct TypedCase {
  int32_t code;
  DType dtype;
  std::vector<int64_t> dims;
  std::function<void(Tp&)> fill;
  std::vector<uint8_t> want;
};

std::vector<TypedCase> typed_cases() {
  auto i32 = [](std::vector<int32_t> v) {
    return [v](Tp& t) {
      for (int32_t x : v) t.add_int32_data(x);
    };
  };
  std::vector<TypedCase> c;
  c.push_back({1, DType::Float, {3}, [](Tp& t) {
                 for (float v : {1.5f, -2.f, 0.25f}) t.add_float_data(v);
               }, bytes_of<float>({1.5f, -2.f, 0.25f})});
  c.push_back({2, DType::UInt8, {3}, i32({0, 200, 255}), {0, 200, 255}});
  c.push_back({3, DType::Int8, {3}, i32({-1, 127, -128}), {0xff, 0x7f, 0x80}});
  c.push_back({4, DType::UInt16, {3}, i32({1, 65535, 256}), bytes_of<uint16_t>({1, 65535, 256})});
  c.push_back({5, DType::Int16, {3}, i32({-2, 300, -32768}), bytes_of<int16_t>({-2, 300, -32768})});
  c.push_back({6, DType::Int32, {3}, i32({-7, 1 << 30, 0}), bytes_of<int32_t>({-7, 1 << 30, 0})});
  c.push_back({7, DType::Int64, {3}, [](Tp& t) {
                 for (int64_t v : {int64_t{-1}, INT64_MAX, int64_t{42}}) t.add_int64_data(v);
               }, bytes_of<int64_t>({-1, INT64_MAX, 42})});
  c.push_back({9, DType::Bool, {3}, i32({1, 0, 1}), {1, 0, 1}});
  c.push_back({10, DType::Float16, {3}, i32({0x3c00, 0xc000, 0x7c00}),
               bytes_of<uint16_t>({0x3c00, 0xc000, 0x7c00})});
  c.push_back({11, DType::Double, {3}, [](Tp& t) {
                 for (double v : {1e300, -0.5, 3.0}) t.add_double_data(v);
               }, bytes_of<double>({1e300, -0.5, 3.0})});
  c.push_back({12, DType::UInt32, {3}, [](Tp& t) {
                 for (uint64_t v : {0xffffffffull, 1ull, 7ull}) t.add_uint64_data(v);
               }, bytes_of<uint32_t>({0xffffffffu, 1u, 7u})});
  c.push_back({13, DType::UInt64, {3}, [](Tp& t) {
                 for (uint64_t v : {UINT64_MAX, uint64_t{0}, uint64_t{5}}) t.add_uint64_data(v);
               }, bytes_of<uint64_t>({UINT64_MAX, 0, 5})});
  c.push_back({14, DType::Complex64, {2}, [](Tp& t) {
                 for (float v : {1.f, 2.f, 3.f, 4.f}) t.add_float_data(v);
               }, bytes_of<float>({1.f, 2.f, 3.f, 4.f})});
  c.push_back({15, DType::Complex128, {2}, [](Tp& t) {
                 for (double v : {1.0, 2.0, 3.0, 4.0}) t.add_double_data(v);
               }, bytes_of<double>({1.0, 2.0, 3.0, 4.0})});
  c.push_back({16, DType::BFloat16, {3}, i32({0x3f80, 0xbf80, 0}),
               bytes_of<uint16_t>({0x3f80, 0xbf80, 0})});
  c.push_back({17, DType::Float8E4M3FN, {3}, i32({0x38, 0xb8, 0x7e}), {0x38, 0xb8, 0x7e}});
  c.push_back({18, DType::Float8E4M3FNUZ, {3}, i32({0x40, 0xc0, 0x7f}), {0x40, 0xc0, 0x7f}});
  c.push_back({19, DType::Float8E5M2, {3}, i32({0x3c, 0xbc, 0x7b}), {0x3c, 0xbc, 0x7b}});
  c.push_back({20, DType::Float8E5M2FNUZ, {3}, i32({0x40, 0xc0, 0x7f}), {0x40, 0xc0, 0x7f}});
  // 4-bit types: two elements per entry, first in the low nibble; 3 elements need 2 entries.
  c.push_back({21, DType::UInt4, {3}, i32({0x21, 0x03}), {0x21, 0x03}});
  c.push_back({22, DType::Int4, {3}, i32({0xf7, 0x08}), {0xf7, 0x08}});
  return c;
}

TEST_F(FrontendImport, EveryDataTypeFromTypedFields) {
  auto cases = typed_cases();
  // Every numeric dtype of the table is covered (String has its own test).
  int numeric = 0;
#define CUVIL_X(e, code, name, bits) numeric += (bits) > 0;
  CUVIL_DTYPES(CUVIL_X)
#undef CUVIL_X
  EXPECT_EQ(static_cast<int>(cases.size()), numeric);
  for (const auto& c : cases) {
    SCOPED_TRACE(dtype_name(c.dtype));
    Tp t;
    t.set_name("w");
    t.set_data_type(c.code);
    for (int64_t d : c.dims) t.add_dims(d);
    c.fill(t);
    Model m = import_initializer(t);
    const Value& v = m.graph->value(m.graph->find("w"));
    ASSERT_TRUE(v.data);
    EXPECT_EQ(v.data->dtype, c.dtype);
    EXPECT_EQ(v.dtype, c.dtype);
    EXPECT_EQ(v.data->dims, c.dims);
    EXPECT_EQ(v.data->bytes, c.want);
    EXPECT_TRUE(v.is_initializer);
  }
}

TEST_F(FrontendImport, EveryDataTypeFromRawData) {
  for (const auto& c : typed_cases()) {
    SCOPED_TRACE(dtype_name(c.dtype));
    std::string raw(c.want.begin(), c.want.end());
    Model m = import_initializer(test::make_raw_tensor("w", c.code, c.dims, raw));
    const Value& v = m.graph->value(m.graph->find("w"));
    ASSERT_TRUE(v.data);
    EXPECT_EQ(v.data->dtype, c.dtype);
    EXPECT_EQ(v.data->bytes, c.want);
    ASSERT_TRUE(v.shape.has_value());
    ASSERT_EQ(v.shape->size(), c.dims.size());
    EXPECT_EQ((*v.shape)[0]->constant(), c.dims[0]);
  }
}

TEST_F(FrontendImport, StringScalarAndEmptyTensors) {
  Tp s;
  s.set_name("w");
  s.set_data_type(Tp::STRING);
  s.add_dims(2);
  s.add_string_data("hello");
  s.add_string_data(std::string("a\0b", 3));
  Model m = import_initializer(s);
  const Value& v = m.graph->value(m.graph->find("w"));
  EXPECT_EQ(v.data->dtype, DType::String);
  EXPECT_EQ(v.data->strings, (std::vector<std::string>{"hello", std::string("a\0b", 3)}));

  Model scalar = import_initializer(test::make_float_tensor("w", {}, {7.f}));
  const Value& sv = scalar.graph->value(scalar.graph->find("w"));
  EXPECT_TRUE(sv.data->dims.empty());
  EXPECT_EQ(sv.data->bytes, bytes_of<float>({7.f}));
  EXPECT_EQ(sv.shape, Shape{});

  Model empty = import_initializer(test::make_float_tensor("w", {0, 5}, {}));
  const Value& ev = empty.graph->value(empty.graph->find("w"));
  EXPECT_EQ(ev.data->dims, (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(ev.data->bytes.empty());
}

TEST_F(FrontendImport, EveryAttributeKind) {
  onnx::ModelProto m = test::make_model();
  test::add_opset(m, "test.attrs", 1);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  auto* n = test::add_node(g, "Everything", {"x"}, {"y"}, "everything", "test.attrs");
  using A = onnx::AttributeProto;
  test::set_attr_float(n, "f", 0.5f);
  test::set_attr_int(n, "i", -3);
  test::set_attr_string(n, "s", "text");
  test::set_attr_tensor(n, "t", test::make_float_tensor("", {2}, {1.f, 2.f}));
  auto* sub = test::set_attr_graph(n, "g");
  sub->set_name("body");
  test::add_node(sub, "Neg", {"x"}, {"neg"}, "neg_in_body");
  test::add_output(sub, "neg");
  {
    auto* a = test::add_attr(n, "sparse", A::SPARSE_TENSOR);
    auto* st = a->mutable_sparse_tensor();
    st->add_dims(4);
    *st->mutable_values() = test::make_float_tensor("v", {1}, {9.f});
    *st->mutable_indices() = test::make_int64_tensor("i", {1}, {2});
  }
  test::add_attr(n, "tp", A::TYPE_PROTO)->mutable_tp()->mutable_tensor_type()->set_elem_type(Tp::INT8);
  {
    auto* a = test::add_attr(n, "fs", A::FLOATS);
    a->add_floats(1.f);
    a->add_floats(-1.f);
  }
  test::set_attr_ints(n, "is", {1, 2, 3});
  {
    auto* a = test::add_attr(n, "ss", A::STRINGS);
    a->add_strings("a");
    a->add_strings("b");
  }
  {
    auto* a = test::add_attr(n, "ts", A::TENSORS);
    *a->add_tensors() = test::make_int64_tensor("", {1}, {5});
    *a->add_tensors() = test::make_int64_tensor("", {2}, {6, 7});
  }
  {
    auto* a = test::add_attr(n, "gs", A::GRAPHS);
    for (int k = 0; k < 2; ++k) {
      auto* sg = a->add_graphs();
      sg->set_name("graphs" + std::to_string(k));
      test::add_node(sg, "Identity", {"x"}, {"id" + std::to_string(k)});
      test::add_output(sg, "id" + std::to_string(k));
    }
  }
  {
    auto* a = test::add_attr(n, "sparses", A::SPARSE_TENSORS);
    auto* st = a->add_sparse_tensors();
    st->add_dims(3);
    *st->mutable_values() = test::make_float_tensor("v", {0}, {});
    *st->mutable_indices() = test::make_int64_tensor("i", {0}, {});
  }
  {
    auto* a = test::add_attr(n, "tps", A::TYPE_PROTOS);
    a->add_type_protos()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
    a->add_type_protos()->mutable_sequence_type();
  }
  // Old models leave `type` unset; the kind comes from the field that is set.
  {
    auto* a = n->add_attribute();
    a->set_name("old_int");
    a->set_i(11);
    auto* b = n->add_attribute();
    b->set_name("old_floats");
    b->add_floats(2.5f);
  }
  test::add_output(g, "y");

  Model model = import(m);
  const Node& node = node_named(*model.graph, "everything");
  EXPECT_EQ(node.op, OpKind::Unknown);
  using K = Attribute::Kind;
  auto get = [&](const char* key) -> const Attribute& {
    const Attribute* a = node.attr(key);
    if (!a) throw std::runtime_error(std::string("missing attribute ") + key);
    return *a;
  };
  EXPECT_EQ(get("f").kind, K::Float);
  EXPECT_EQ(get("f").f, 0.5f);
  EXPECT_EQ(get("i").kind, K::Int);
  EXPECT_EQ(get("i").i, -3);
  EXPECT_EQ(get("s").kind, K::String);
  EXPECT_EQ(get("s").s, "text");
  EXPECT_EQ(get("t").kind, K::Tensor);
  ASSERT_TRUE(get("t").t);
  EXPECT_EQ(get("t").t->bytes, bytes_of<float>({1.f, 2.f}));
  EXPECT_EQ(get("g").kind, K::Graph);
  ASSERT_TRUE(get("g").g);
  EXPECT_EQ(get("g").g->name, "body");
  EXPECT_EQ(get("g").g->parent, model.graph.get());
  EXPECT_EQ(get("g").g->captures.size(), 1u);
  EXPECT_EQ(get("sparse").kind, K::SparseTensor);
  ASSERT_EQ(get("sparse").strings.size(), 1u);
  EXPECT_NE(get("sparse").strings[0].find("dims: 4"), std::string::npos) << get("sparse").strings[0];
  EXPECT_EQ(get("tp").kind, K::TypeProto);
  ASSERT_EQ(get("tp").strings.size(), 1u);
  EXPECT_NE(get("tp").strings[0].find("elem_type: 3"), std::string::npos) << get("tp").strings[0];
  EXPECT_EQ(get("fs").kind, K::Floats);
  EXPECT_EQ(get("fs").floats, (std::vector<float>{1.f, -1.f}));
  EXPECT_EQ(get("is").kind, K::Ints);
  EXPECT_EQ(get("is").ints, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(get("ss").kind, K::Strings);
  EXPECT_EQ(get("ss").strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(get("ts").kind, K::Tensors);
  ASSERT_EQ(get("ts").tensors.size(), 2u);
  EXPECT_EQ(get("ts").tensors[1]->bytes, bytes_of<int64_t>({6, 7}));
  EXPECT_EQ(get("gs").kind, K::Graphs);
  ASSERT_EQ(get("gs").graphs.size(), 2u);
  EXPECT_EQ(get("gs").graphs[1]->name, "graphs1");
  EXPECT_EQ(get("gs").graphs[1]->parent, model.graph.get());
  EXPECT_EQ(get("sparses").kind, K::SparseTensors);
  EXPECT_EQ(get("sparses").strings.size(), 1u);
  EXPECT_EQ(get("tps").kind, K::TypeProtos);
  EXPECT_EQ(get("tps").strings.size(), 2u);
  EXPECT_EQ(get("old_int").kind, K::Int);
  EXPECT_EQ(get("old_int").i, 11);
  EXPECT_EQ(get("old_floats").kind, K::Floats);
  EXPECT_EQ(get("old_floats").floats, std::vector<float>{2.5f});
  EXPECT_EQ(node.attrs.size(), 16u);
}

TEST_F(FrontendImport, IfBranchesCaptureOuterValues) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_input(g, "cond", Tp::BOOL, {});
  *g->add_initializer() = test::make_float_tensor("w", {4}, {1, 2, 3, 4});
  auto* iff = test::add_node(g, "If", {"cond"}, {"y"}, "if_node");
  auto* t = test::set_attr_graph(iff, "then_branch");
  t->set_name("then");
  test::add_node(t, "Add", {"x", "w"}, {"then_out"}, "then_add");
  test::add_output(t, "then_out");
  auto* e = test::set_attr_graph(iff, "else_branch");
  e->set_name("else");
  test::add_node(e, "Neg", {"x"}, {"else_out"}, "else_neg");
  test::add_output(e, "else_out");
  test::add_output(g, "y");

  Model model = import(m);
  const Graph& main = *model.graph;
  const Node& node = node_named(main, "if_node");
  EXPECT_EQ(node.op, OpKind::If);
  const Graph& then_g = *node.attr("then_branch")->g;
  const Graph& else_g = *node.attr("else_branch")->g;
  EXPECT_EQ(then_g.parent, &main);
  EXPECT_EQ(else_g.parent, &main);
  ASSERT_EQ(then_g.captures.size(), 2u);
  for (ValueId c : then_g.captures) {
    const Value& v = then_g.value(c);
    ASSERT_NE(v.outer, kNoValue);
    EXPECT_EQ(main.value(v.outer).name, v.name);
    EXPECT_EQ(v.outer, main.find(v.name));
  }
  ASSERT_EQ(else_g.captures.size(), 1u);
  EXPECT_EQ(else_g.value(else_g.captures[0]).outer, main.find("x"));
  // The branch node reads the capture, not a value of the parent graph.
  const Node& add = node_named(then_g, "then_add");
  EXPECT_EQ(then_g.value(add.inputs[0]).outer, main.find("x"));
  EXPECT_EQ(then_g.value(add.inputs[1]).outer, main.find("w"));
  ASSERT_EQ(then_g.outputs.size(), 1u);
  EXPECT_EQ(then_g.value(then_g.outputs[0]).name, "then_out");
}

TEST_F(FrontendImport, LoopAndScanBodiesCaptureThroughSeveralLevels) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_input(g, "trip", Tp::INT64, {});
  test::add_input(g, "cond", Tp::BOOL, {});
  test::add_input(g, "seq", Tp::FLOAT, {5, 4});
  *g->add_initializer() = test::make_float_tensor("w", {4}, {1, 2, 3, 4});
  // Loop body: (i, c, v) -> (c, v + w); inside it an If whose branch reads x from main.
  auto* loop = test::add_node(g, "Loop", {"trip", "cond", "x"}, {"loop_out"}, "loop_node");
  auto* body = test::set_attr_graph(loop, "body");
  body->set_name("loop_body");
  test::add_input(body, "i", Tp::INT64, {});
  test::add_input(body, "c_in", Tp::BOOL, {});
  test::add_input(body, "v_in");
  test::add_node(body, "Identity", {"c_in"}, {"c_out"}, "body_cond");
  test::add_node(body, "Add", {"v_in", "w"}, {"v_sum"}, "body_add");
  auto* iff = test::add_node(body, "If", {"c_in"}, {"v_out"}, "body_if");
  auto* t = test::set_attr_graph(iff, "then_branch");
  t->set_name("inner_then");
  test::add_node(t, "Mul", {"v_sum", "x"}, {"t_out"}, "inner_mul");
  test::add_output(t, "t_out");
  auto* e = test::set_attr_graph(iff, "else_branch");
  e->set_name("inner_else");
  test::add_node(e, "Identity", {"v_sum"}, {"e_out"}, "inner_id");
  test::add_output(e, "e_out");
  test::add_output(body, "c_out", Tp::BOOL, {});
  test::add_output(body, "v_out");
  // Scan over seq's rows with state x: body (s, row) -> (s + row * w, row).
  auto* scan = test::add_node(g, "Scan", {"x", "seq"}, {"scan_state", "scan_rows"}, "scan_node");
  test::set_attr_int(scan, "num_scan_inputs", 1);
  auto* sb = test::set_attr_graph(scan, "body");
  sb->set_name("scan_body");
  test::add_input(sb, "s_in");
  test::add_input(sb, "row");
  test::add_node(sb, "Mul", {"row", "w"}, {"rw"}, "scan_mul");
  test::add_node(sb, "Add", {"s_in", "rw"}, {"s_out"}, "scan_add");
  test::add_node(sb, "Identity", {"row"}, {"row_out"}, "scan_id");
  test::add_output(sb, "s_out");
  test::add_output(sb, "row_out");
  test::add_output(g, "loop_out");
  test::add_output(g, "scan_state");

  Model model = import(m);
  const Graph& main = *model.graph;
  const Graph& lb = *node_named(main, "loop_node").attr("body")->g;
  EXPECT_EQ(lb.parent, &main);
  EXPECT_EQ(lb.inputs.size(), 3u);
  const Graph& inner = *node_named(lb, "body_if").attr("then_branch")->g;
  EXPECT_EQ(inner.parent, &lb);
  // inner_then captures v_sum (from the loop body) and x (from main, through the loop body).
  ValueId inner_x = inner.find("x");
  ASSERT_NE(inner_x, kNoValue);
  ValueId body_x = inner.value(inner_x).outer;
  ASSERT_NE(body_x, kNoValue);
  EXPECT_EQ(lb.value(body_x).name, "x");
  EXPECT_EQ(lb.value(body_x).outer, main.find("x"));
  ValueId inner_vsum = inner.find("v_sum");
  ASSERT_NE(inner_vsum, kNoValue);
  EXPECT_EQ(inner.value(inner_vsum).outer, lb.find("v_sum"));
  EXPECT_EQ(lb.value(lb.find("v_sum")).outer, kNoValue);  // defined in the body itself
  EXPECT_EQ(lb.value(lb.find("w")).outer, main.find("w"));

  const Graph& scb = *node_named(main, "scan_node").attr("body")->g;
  EXPECT_EQ(scb.parent, &main);
  ASSERT_EQ(scb.captures.size(), 1u);
  EXPECT_EQ(scb.value(scb.captures[0]).outer, main.find("w"));
  EXPECT_EQ(node_named(main, "scan_node").attr_int("num_scan_inputs", 0), 1);
}

// FunctionProto "ScaledLeaky" in domain my.fns: Y = LeakyRelu(X, alpha=@alpha) * 2.
onnx::FunctionProto scaled_leaky() {
  onnx::FunctionProto f;
  f.set_name("ScaledLeaky");
  f.set_domain("my.fns");
  f.add_input("X");
  f.add_output("Y");
  f.add_attribute("alpha");
  auto* leaky = f.add_node();
  leaky->set_op_type("LeakyRelu");
  leaky->set_name("leaky");
  leaky->add_input("X");
  leaky->add_output("T");
  auto* ref = leaky->add_attribute();
  ref->set_name("alpha");
  ref->set_type(onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("alpha");
  auto* two = f.add_node();
  two->set_op_type("Constant");
  two->set_name("two");
  two->add_output("Two");
  test::set_attr_tensor(two, "value", test::make_float_tensor("", {}, {2.f}));
  auto* mul = f.add_node();
  mul->set_op_type("Mul");
  mul->set_name("mul");
  mul->add_input("T");
  mul->add_input("Two");
  mul->add_output("Y");
  return f;
}

TEST_F(FrontendImport, ModelLocalFunctionIsInlinedWithAttributeReferences) {
  onnx::ModelProto m = test::make_model(17);
  test::add_opset(m, "my.fns", 1);
  *m.add_functions() = scaled_leaky();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  auto* call = test::add_node(g, "ScaledLeaky", {"x"}, {"y"}, "call_a", "my.fns");
  test::set_attr_float(call, "alpha", 0.3f);
  test::add_node(g, "ScaledLeaky", {"y"}, {"z"}, "call_b", "my.fns");  // alpha left unset
  test::add_output(g, "z");

  Model model = import(m);
  EXPECT_EQ(model.local_functions, std::vector<std::string>{"my.fns::ScaledLeaky"});
  const Graph& main = *model.graph;
  ASSERT_EQ(main.nodes.size(), 6u);
  std::vector<std::string> ops;
  for (const Node& n : main.nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"LeakyRelu", "Constant", "Mul", "LeakyRelu",
                                           "Constant", "Mul"}));
  for (const Node& n : main.nodes) {
    EXPECT_NE(n.op, OpKind::Unknown) << n.name;
    EXPECT_EQ(n.domain, "");
    EXPECT_EQ(n.opset, 17) << n.name;  // the function imports no opsets: the model's apply
  }
  const Node& leaky_a = main.nodes[0];
  EXPECT_NE(leaky_a.name.find("call_a"), std::string::npos) << leaky_a.name;
  EXPECT_NE(leaky_a.name.find("leaky"), std::string::npos) << leaky_a.name;
  ASSERT_TRUE(leaky_a.attr("alpha"));
  EXPECT_EQ(leaky_a.attr("alpha")->kind, Attribute::Kind::Float);
  EXPECT_FLOAT_EQ(leaky_a.attr("alpha")->f, 0.3f);
  EXPECT_EQ(main.nodes[3].attr("alpha"), nullptr);  // unset reference: op default applies
  // Boundary names are the caller's; internal names are private to each call.
  EXPECT_EQ(main.value(leaky_a.inputs[0]).name, "x");
  EXPECT_EQ(main.value(main.nodes[2].outputs[0]).name, "y");
  EXPECT_EQ(main.value(main.nodes[5].outputs[0]).name, "z");
  EXPECT_NE(main.value(leaky_a.outputs[0]).name, main.value(main.nodes[3].outputs[0]).name);
  EXPECT_EQ(main.value(main.outputs[0]).name, "z");
}

TEST_F(FrontendImport, FunctionWithItsOwnOpsetsAndNestedCalls) {
  onnx::ModelProto m = test::make_model(17);
  test::add_opset(m, "my.fns", 1);
  onnx::FunctionProto inner = scaled_leaky();
  auto* io = inner.add_opset_import();
  io->set_domain("");
  io->set_version(13);
  *m.add_functions() = inner;
  // Outer(X) = ScaledLeaky(X, alpha = @beta), forwarding its own attribute.
  auto* outer = m.add_functions();
  outer->set_name("Outer");
  outer->set_domain("my.fns");
  outer->add_input("X");
  outer->add_output("Y");
  outer->add_attribute("beta");
  auto* oo = outer->add_opset_import();
  oo->set_domain("my.fns");
  oo->set_version(1);
  auto* n = outer->add_node();
  n->set_op_type("ScaledLeaky");
  n->set_domain("my.fns");
  n->add_input("X");
  n->add_output("Y");
  auto* ref = n->add_attribute();
  ref->set_name("alpha");
  ref->set_type(onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("beta");
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  auto* call = test::add_node(g, "Outer", {"x"}, {"y"}, "call", "my.fns");
  test::set_attr_float(call, "beta", 0.7f);
  test::add_output(g, "y");

  Model model = import(m);
  ASSERT_EQ(model.graph->nodes.size(), 3u);
  const Node& leaky = model.graph->nodes[0];
  EXPECT_EQ(leaky.op, OpKind::LeakyRelu);
  EXPECT_EQ(leaky.opset, 13);  // the innermost function's own opset import
  ASSERT_TRUE(leaky.attr("alpha"));
  EXPECT_FLOAT_EQ(leaky.attr("alpha")->f, 0.7f);
}

TEST_F(FrontendImport, FunctionBodySubgraphsSeeTheFunctionsNames) {
  // F(C, A) = If(C, then: Identity(A), else: Neg(A)). The caller passes its value "a" and also
  // has an unrelated value named "A": the branches must read "a".
  onnx::ModelProto m = test::make_model(17);
  test::add_opset(m, "my.fns", 1);
  auto* f = m.add_functions();
  f->set_name("Choose");
  f->set_domain("my.fns");
  f->add_input("C");
  f->add_input("A");
  f->add_output("Y");
  auto* fo = f->add_opset_import();
  fo->set_domain("");
  fo->set_version(17);
  auto* iff = f->add_node();
  iff->set_op_type("If");
  iff->set_name("choose_if");
  iff->add_input("C");
  iff->add_output("Y");
  auto* t = test::set_attr_graph(iff, "then_branch");
  t->set_name("then");
  test::add_node(t, "Identity", {"A"}, {"t_out"}, "then_id");
  test::add_output(t, "t_out");
  auto* e = test::set_attr_graph(iff, "else_branch");
  e->set_name("else");
  test::add_node(e, "Neg", {"A"}, {"A_neg"}, "else_neg");
  test::add_node(e, "Identity", {"A_neg"}, {"e_out"}, "else_id");  // local names stay local
  test::add_output(e, "e_out");
  auto* g = m.mutable_graph();
  test::add_input(g, "A");
  test::add_input(g, "a");
  test::add_input(g, "c", Tp::BOOL, {});
  test::add_node(g, "Choose", {"c", "a"}, {"y"}, "call", "my.fns");
  test::add_node(g, "Add", {"y", "A"}, {"z"}, "use_A");
  test::add_output(g, "z");

  Model model = import(m);
  const Graph& main = *model.graph;
  const Node& node = main.nodes[0];
  ASSERT_EQ(node.op, OpKind::If);
  EXPECT_EQ(main.value(node.inputs[0]).name, "c");
  for (const char* branch : {"then_branch", "else_branch"}) {
    const Graph& b = *node.attr(branch)->g;
    ASSERT_EQ(b.captures.size(), 1u) << branch;
    EXPECT_EQ(b.value(b.captures[0]).outer, main.find("a")) << branch;
  }
}

TEST_F(FrontendImport, OpsetVersionsAreRecordedOnEachNode) {
  onnx::ModelProto m = test::make_model(13);
  m.mutable_opset_import(0)->set_domain("ai.onnx");  // the same as ""
  test::add_opset(m, "com.microsoft", 1);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_input(g, "cond", Tp::BOOL, {});
  test::add_node(g, "Relu", {"x"}, {"a"}, "relu");
  test::add_node(g, "FusedMatMul", {"a", "a"}, {"b"}, "ms_node", "com.microsoft");
  auto* iff = test::add_node(g, "If", {"cond"}, {"y"}, "if_node");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* b = test::set_attr_graph(iff, branch);
    test::add_node(b, "Sigmoid", {"b"}, {std::string(branch) + "_out"},
                   std::string(branch) + "_sigmoid");
    test::add_output(b, std::string(branch) + "_out");
  }
  test::add_output(g, "y");

  Model model = import(m);
  EXPECT_EQ(model.opset_imports.at(""), 13);
  EXPECT_EQ(model.opset_imports.at("com.microsoft"), 1);
  EXPECT_EQ(model.opset_imports.count("ai.onnx"), 0u);
  EXPECT_EQ(opset_of(model, "ai.onnx"), 13);
  const Graph& main = *model.graph;
  EXPECT_EQ(node_named(main, "relu").opset, 13);
  EXPECT_EQ(node_named(main, "if_node").opset, 13);
  const Node& ms = node_named(main, "ms_node");
  EXPECT_EQ(ms.domain, "com.microsoft");
  EXPECT_EQ(ms.opset, 1);
  EXPECT_EQ(ms.op, OpKind::Unknown);
  const Graph& then_g = *node_named(main, "if_node").attr("then_branch")->g;
  EXPECT_EQ(node_named(then_g, "then_branch_sigmoid").opset, 13);
}

TEST_F(FrontendImport, SymbolicDimsFromDimParamsAndGeneratedNames) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3});
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim();  // no value
  test::add_node(g, "Relu", {"x"}, {"y"}, "relu");
  test::add_output(g, "y");
  Model model = import(m);
  const Value& x = model.graph->value(model.graph->inputs[0]);
  ASSERT_TRUE(x.shape.has_value());
  ASSERT_EQ(x.shape->size(), 3u);
  EXPECT_EQ((*x.shape)[0]->as_symbol(), "batch");
  EXPECT_EQ((*x.shape)[1]->constant(), 3);
  EXPECT_EQ((*x.shape)[2]->as_symbol(), "x_dim2");
  EXPECT_EQ(model.ranges.get("batch").lo, 0);
  EXPECT_EQ(model.ranges.get("batch").hi, sym::Range::kUnbounded);

  frontend::ImportOptions fixed;
  fixed.dims.push_back(frontend::parse_dim_option("batch=4"));
  fixed.dims.push_back(frontend::parse_dim_option("x_dim2=1:64"));
  Model f = import(m, fixed);
  const Value& fx = f.graph->value(f.graph->inputs[0]);
  EXPECT_EQ((*fx.shape)[0]->constant(), 4);
  EXPECT_EQ((*fx.shape)[2]->as_symbol(), "x_dim2");
  EXPECT_EQ(f.ranges.get("x_dim2").lo, 1);
  EXPECT_EQ(f.ranges.get("x_dim2").hi, 64);

  frontend::ImportOptions unknown;
  unknown.dims.push_back(frontend::parse_dim_option("seq=8"));
  EXPECT_TRUE(FailsWith([&] { import(m, unknown); }, ExitCode::kUsage,
                        {"--dim seq", "'seq'", "batch", "x_dim2"}));
}

TEST_F(FrontendImport, ParseDimOption) {
  auto [name, r] = frontend::parse_dim_option("batch=4");
  EXPECT_EQ(name, "batch");
  EXPECT_EQ(r.lo, 4);
  EXPECT_EQ(r.hi, 4);
  auto [n2, r2] = frontend::parse_dim_option("seq=1:512");
  EXPECT_EQ(n2, "seq");
  EXPECT_EQ(r2.lo, 1);
  EXPECT_EQ(r2.hi, 512);
  auto [n3, r3] = frontend::parse_dim_option("len=16:");
  EXPECT_EQ(n3, "len");
  EXPECT_EQ(r3.lo, 16);
  EXPECT_EQ(r3.hi, sym::Range::kUnbounded);
  auto [n4, r4] = frontend::parse_dim_option("a=0:0");
  EXPECT_EQ(n4, "a");
  EXPECT_EQ(r4.hi, 0);

  for (const char* bad : {"", "batch", "=4", "batch=", "batch=x", "batch=-1", "batch=5:3",
                          "batch=1:2:3", "batch=:8", "batch=1.5", "batch= 4",
                          "batch=99999999999999999999", "batch=4:abc"}) {
    EXPECT_TRUE(FailsWith([&] { frontend::parse_dim_option(bad); }, ExitCode::kUsage,
                          {"--dim '" + std::string(bad) + "'"}))
        << bad;
  }
}

}  // namespace
}  // namespace cuvil
