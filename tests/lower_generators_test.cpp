// Code generation of shape-driven ops from expressions: a Reshape whose output shape the
// compiler knows becomes a copy kernel (its cuvil::SymbolicInts shape operand is then not
// emitted at all), Expand and ConstantOfShape become tile kernels over the output's symbolic
// shape (fusing with their consumers), and Where becomes a Select. Each is checked for the
// op calls left and for its outputs over several bound shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>

#include "codegen/lower.h"
#include "compile_in_process.h"
#include "run_tool.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::Tp;

// Adds s = [Shape(x)[0], n] (int64[2]) the way exporters spell a shape: Shape, Gather,
// Unsqueeze, Concat.
void add_batch_shape(onnx::GraphProto* g, const std::string& x, int64_t n, const std::string& out) {
  *g->add_initializer() = test::make_int64_tensor(out + "_zero", {}, {0});
  *g->add_initializer() = test::make_int64_tensor(out + "_n", {1}, {n});
  *g->add_initializer() = test::make_int64_tensor(out + "_axes", {1}, {0});
  test::add_node(g, "Shape", {x}, {out + "_s"});
  test::add_node(g, "Gather", {out + "_s", out + "_zero"}, {out + "_b"});
  test::add_node(g, "Unsqueeze", {out + "_b", out + "_axes"}, {out + "_b1"});
  test::set_attr_int(test::add_node(g, "Concat", {out + "_b1", out + "_n"}, {out}), "axis", 0);
}

// A float output whose shape the graph leaves to inference (its dims are expressions).
void add_unshaped_output(onnx::GraphProto* g, const std::string& name) {
  auto* vi = g->add_output();
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
}

struct Compiled {
  codegen::LoweredModel lowered;
  std::vector<uint8_t> package;
};

Compiled compile(const onnx::ModelProto& m) {
  Model model = test::import_for_codegen(m, {"batch=1:8"});
  Compiled c;
  c.lowered = codegen::lower_model(model);
  c.package = codegen::build_package(model, c.lowered);
  return c;
}

// r = Reshape(x, [batch, 12]) (a graph output) and y = r * 2 over x: f32[batch, 3, 4]: r is a
// copy kernel, and the Mul loads x itself with r's shape (a reshape keeps row-major order).
TEST(LowerGenerators, ReshapeWithAKnownShapeIsACopyKernel) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3, 4});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 12});
  test::add_output(g, "r", Tp::FLOAT, {"batch", 12});
  *g->add_initializer() = test::make_float_tensor("two", {}, {2.0f});
  add_batch_shape(g, "x", 12, "shape");
  test::add_node(g, "Reshape", {"x", "shape"}, {"r"});
  test::add_node(g, "Mul", {"r", "two"}, {"y"});
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 0);
  EXPECT_EQ(c.lowered.fused_kernels, 2) << "the copy and the Mul";
  EXPECT_EQ(c.lowered.skipped_nodes, 1) << "the SymbolicInts shape operand is not emitted";
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  for (int64_t batch : {1, 5}) {
    std::vector<float> x(static_cast<size_t>(batch * 12));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 7.5f;
    ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {batch, 3, 4}, x)));
    ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    EXPECT_EQ(test::output<float>(s.get(), 1, &dims), x);
    EXPECT_EQ(dims, (std::vector<int64_t>{batch, 12}));
    std::vector<float> y = test::output<float>(s.get(), 0, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{batch, 12}));
    for (float& v : x) v *= 2.0f;
    EXPECT_EQ(y, x);
  }
}

// y = Reshape(x, [batch, 12]) * 2 alone: the Mul reads x with the Reshape's shape, so neither
// the Reshape nor its shape operand is run-time work.
TEST(LowerGenerators, ReshapeReadOnlyByAKernelIsNotEmitted) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3, 4});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 12});
  *g->add_initializer() = test::make_float_tensor("two", {}, {2.0f});
  add_batch_shape(g, "x", 12, "shape");
  test::add_node(g, "Reshape", {"x", "shape"}, {"r"});
  test::add_node(g, "Mul", {"r", "two"}, {"y"});
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 0);
  EXPECT_EQ(c.lowered.fused_kernels, 1);
  EXPECT_EQ(c.lowered.skipped_nodes, 2) << "the Reshape and its SymbolicInts";
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  std::vector<float> x(36);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {3, 3, 4}, x)));
  ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
  for (float& v : x) v *= 2.0f;
  EXPECT_EQ(test::output<float>(s.get(), 0), x);
}

// An int64 Reshape cannot go through float32 registers exactly: it stays an op call, and so
// does its shape operand.
TEST(LowerGenerators, Int64ReshapeStaysAnOpCall) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::INT64, {"batch", 3, 4});
  test::add_output(g, "y", Tp::INT64, {"batch", 12});
  add_batch_shape(g, "x", 12, "shape");
  test::add_node(g, "Reshape", {"x", "shape"}, {"y"});
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 2);
  EXPECT_EQ(c.lowered.skipped_nodes, 0);
}

// Slice of a weight with symbolic ends (the exporters' causal-mask and rotary-table slices):
// y = Slice(t, [1], [batch], axes [0]) * 2 over t: f32[9, 6], and z = Cast(Slice(bm, ...)) of a
// bool weight bm: f32 and bool tensors read through a map whose offset is the start, no op
// calls, and the shape arithmetic of the ends is not emitted.
TEST(LowerGenerators, SliceWithSymbolicEndsIsAStridedLoad) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 2});
  add_unshaped_output(g, "y");
  add_unshaped_output(g, "z");
  std::vector<float> t(54);
  for (size_t i = 0; i < t.size(); ++i) t[i] = 0.5f * static_cast<float>(i) - 3.0f;
  std::string bits(54, '\0');
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<char>(i % 4 == 1);
  *g->add_initializer() = test::make_float_tensor("t", {9, 6}, t);
  *g->add_initializer() = test::make_raw_tensor("bm", onnx::TensorProto::BOOL, {9, 6}, bits);
  *g->add_initializer() = test::make_float_tensor("two", {}, {2.0f});
  *g->add_initializer() = test::make_int64_tensor("one", {1}, {1});
  *g->add_initializer() = test::make_int64_tensor("axis0", {1}, {0});
  *g->add_initializer() = test::make_int64_tensor("zero", {}, {0});
  test::add_node(g, "Shape", {"x"}, {"sx"});
  test::add_node(g, "Gather", {"sx", "zero"}, {"b"});
  test::add_node(g, "Unsqueeze", {"b", "axis0"}, {"ends"});
  test::add_node(g, "Slice", {"t", "one", "ends", "axis0"}, {"ts"});
  test::add_node(g, "Mul", {"ts", "two"}, {"y"});
  test::add_node(g, "Slice", {"bm", "one", "ends", "axis0"}, {"bs"});
  test::set_attr_int(test::add_node(g, "Cast", {"bs"}, {"z"}), "to", onnx::TensorProto::FLOAT);
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 0);
  EXPECT_EQ(c.lowered.skipped_nodes, 1) << "the SymbolicInts of the ends";
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  for (int64_t batch : {1, 4, 8}) {
    ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {batch, 2}, std::vector<float>(static_cast<size_t>(batch * 2)))));
    ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    std::vector<float> y = test::output<float>(s.get(), 0, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{batch - 1, 6}));
    std::vector<float> z = test::output<float>(s.get(), 1, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{batch - 1, 6}));
    ASSERT_EQ(y.size(), static_cast<size_t>((batch - 1) * 6));
    ASSERT_EQ(z.size(), y.size());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_EQ(y[i], 2.0f * t[6 + i]) << "batch " << batch << " element " << i;
      EXPECT_EQ(z[i], bits[6 + i] ? 1.0f : 0.0f) << "batch " << batch << " element " << i;
    }
  }
}

// A float Range over a symbolic length (torch.arange(seq, dtype=float) as the rotary tables
// compute it): r = Range(1.0, Cast(seq), 2.0), y = r * 0.5 over x: f32[2, seq]: one
// kernel, an Iota then the chain, bitwise equal to the Range kernel (--no-fusion); the Cast and
// the shape arithmetic of the limit are not run-time work.
TEST(LowerGenerators, FloatRangeIsAnIotaGenerator) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {2, "seq"});
  add_unshaped_output(g, "y");
  *g->add_initializer() = test::make_int64_tensor("one", {}, {1});
  *g->add_initializer() = test::make_float_tensor("start", {}, {1.0f});
  *g->add_initializer() = test::make_float_tensor("delta", {}, {2.0f});
  *g->add_initializer() = test::make_float_tensor("half", {}, {0.5f});
  test::add_node(g, "Shape", {"x"}, {"sx"});
  test::add_node(g, "Gather", {"sx", "one"}, {"n"});
  test::set_attr_int(test::add_node(g, "Cast", {"n"}, {"limit"}), "to", Tp::FLOAT);
  test::add_node(g, "Range", {"start", "limit", "delta"}, {"r"}, "range");
  test::add_node(g, "Mul", {"r", "half"}, {"y"});
  onnx::ModelProto copy = m;
  Model model = test::import_for_codegen(m, {"seq=1:100000"});
  codegen::LoweredModel lowered = codegen::lower_model(model);
  EXPECT_EQ(lowered.call_ops, 0);
  ASSERT_EQ(lowered.kernel_nodes.size(), 1u);
  EXPECT_EQ(lowered.kernel_nodes[0].front(), "range");
  const std::vector<uint8_t> fused = codegen::build_package(model, lowered);
  const std::vector<uint8_t> calls = test::compile_package(copy, {"seq=1:100000"}, false);
  std::vector<std::vector<float>> outs;
  for (const auto* package : {&fused, &calls}) {
    test::ModelPtr loaded = test::load(*package);
    ASSERT_TRUE(loaded);
    test::SessionPtr s = test::open_session(loaded.get(), 2);
    for (int64_t seq : {1, 2, 9, 70001}) {
      ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {2, seq}, std::vector<float>(static_cast<size_t>(2 * seq)))));
      ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
      std::vector<int64_t> dims;
      outs.push_back(test::output<float>(s.get(), 0, &dims));
      EXPECT_EQ(dims, (std::vector<int64_t>{seq / 2}));  // ceil((seq - 1) / 2)
    }
  }
  ASSERT_EQ(outs.size(), 8u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(outs[i], outs[i + 4]) << "seq case " << i;
  EXPECT_EQ(outs[2], (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f}));
}

// torch.flip as exported: y = Slice(x, [-1], [INT64_MIN], axes [1], steps [-1]) over
// x: f32[batch, 5], and every other row, z = Slice(x, [0], [INT64_MAX], axes [0], steps [2]):
// maps with a negative and a scaled stride, no op calls.
TEST(LowerGenerators, SliceWithStepsIsAStridedLoad) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 5});
  add_unshaped_output(g, "y");
  add_unshaped_output(g, "z");
  *g->add_initializer() = test::make_int64_tensor("minus1", {1}, {-1});
  *g->add_initializer() = test::make_int64_tensor("lowest", {1}, {INT64_MIN});
  *g->add_initializer() = test::make_int64_tensor("highest", {1}, {INT64_MAX});
  *g->add_initializer() = test::make_int64_tensor("zero", {1}, {0});
  *g->add_initializer() = test::make_int64_tensor("one", {1}, {1});
  *g->add_initializer() = test::make_int64_tensor("two", {1}, {2});
  test::add_node(g, "Slice", {"x", "minus1", "lowest", "one", "minus1"}, {"y"});
  test::add_node(g, "Slice", {"x", "zero", "highest", "zero", "two"}, {"z"});
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 0);
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  for (int64_t batch : {1, 4, 7}) {
    std::vector<float> x(static_cast<size_t>(batch * 5));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {batch, 5}, x)));
    ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    std::vector<float> y = test::output<float>(s.get(), 0, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{batch, 5}));
    std::vector<float> want_y, want_z;
    for (int64_t r = 0; r < batch; ++r)
      for (int64_t k = 4; k >= 0; --k) want_y.push_back(static_cast<float>(r * 5 + k));
    for (int64_t r = 0; r < batch; r += 2)
      for (int64_t k = 0; k < 5; ++k) want_z.push_back(static_cast<float>(r * 5 + k));
    EXPECT_EQ(y, want_y) << "batch " << batch;
    std::vector<float> z = test::output<float>(s.get(), 1, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{(batch + 1) / 2, 5}));
    EXPECT_EQ(z, want_z) << "batch " << batch;
  }
}

// Position embeddings as exporters write them: p = Unsqueeze(Range(0, seq, 1), [0]),
// y = Gather(table, p) over table: f32[6, 4]: one strided load of the table's first seq
// rows; the Range, the Unsqueeze and the shape arithmetic are not run-time work. A seq past
// the table fails as the Gather kernel does (an index out of range): the map's bound proof.
TEST(LowerGenerators, GatherOfARangeIsAStridedLoad) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 2});
  add_unshaped_output(g, "y");
  std::vector<float> table(24);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.25f;
  *g->add_initializer() = test::make_float_tensor("table", {6, 4}, table);
  *g->add_initializer() = test::make_int64_tensor("zero", {}, {0});
  *g->add_initializer() = test::make_int64_tensor("step", {}, {1});
  *g->add_initializer() = test::make_int64_tensor("axis0", {1}, {0});
  test::add_node(g, "Shape", {"x"}, {"sx"});
  test::add_node(g, "Gather", {"sx", "zero"}, {"n"});
  test::add_node(g, "Range", {"zero", "n", "step"}, {"r"});
  test::add_node(g, "Unsqueeze", {"r", "axis0"}, {"p"});
  test::add_node(g, "Gather", {"table", "p"}, {"y"}, "positions");
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 0);
  EXPECT_EQ(c.lowered.skipped_nodes, 3) << "SymbolicInts, Range, Unsqueeze";
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  for (int64_t batch : {1, 5}) {
    ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {batch, 2}, std::vector<float>(static_cast<size_t>(batch * 2)))));
    ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    std::vector<float> y = test::output<float>(s.get(), 0, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{1, batch, 4}));
    EXPECT_EQ(y, std::vector<float>(table.begin(), table.begin() + batch * 4));
  }
  ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {7, 2}, std::vector<float>(14))));
  EXPECT_TRUE(test::Fails(cuvil_session_run(s.get()), CUVIL_RUNTIME, {"positions", "reaches elements", "'table'"}));
}

// Gather and Slice without a strided-load form say why in the compile report: indices that are
// data, and Slice ends that are data.
TEST(LowerGenerators, GatherAndSliceSayWhyNot) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "ids", Tp::INT64, {"batch", 3});
  test::add_input(g, "ends", Tp::INT64, {1});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 3, 4});
  add_unshaped_output(g, "z");
  *g->add_initializer() = test::make_float_tensor("table", {6, 4}, std::vector<float>(24, 1.0f));
  *g->add_initializer() = test::make_int64_tensor("zero", {1}, {0});
  test::add_node(g, "Gather", {"table", "ids"}, {"y"}, "lookup");
  test::add_node(g, "Slice", {"table", "zero", "ends"}, {"z"}, "rows");
  Compiled c = compile(m);
  std::map<std::string, std::vector<std::string>> why;
  for (const auto& f : c.lowered.not_fused) why[f.node].push_back(f.why);
  EXPECT_EQ(why["lookup"], std::vector<std::string>{
                               "its indices are not a progression known at compile time (a Range, a constant) over known shapes"});
  EXPECT_EQ(why["rows"], std::vector<std::string>{"its starts, ends, axes or steps are not known at compile time"});
}

// y = Cast(Unsqueeze(mask, [1]), float) * -2 over mask: i64[batch, 5] (an attention mask): the
// Cast to float32 is exact from int64 (one rounding, the kernel's), and it loads the mask with
// the Unsqueeze's shape, so the int64 Unsqueeze is not run-time work.
TEST(LowerGenerators, CastOfAReshapedInt64MaskIsOneKernel) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "mask", Tp::INT64, {"batch", 5});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 1, 5});
  *g->add_initializer() = test::make_int64_tensor("axis1", {1}, {1});
  *g->add_initializer() = test::make_float_tensor("k", {}, {-2.0f});
  test::add_node(g, "Unsqueeze", {"mask", "axis1"}, {"u"});
  test::set_attr_int(test::add_node(g, "Cast", {"u"}, {"c"}), "to", onnx::TensorProto::FLOAT);
  test::add_node(g, "Mul", {"c", "k"}, {"y"});
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 0);
  EXPECT_EQ(c.lowered.skipped_nodes, 1) << "the Unsqueeze";
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  const std::vector<int64_t> mask = {1, 0, 1, 1, 0, (int64_t{1} << 40) + 1, -3, 0, 7, 1};
  const int64_t dims_in[] = {2, 5};
  ASSERT_TRUE(test::Ok(cuvil_session_set_input(s.get(), "mask", test::kI64, 2, dims_in, mask.data(),
                                               mask.size() * sizeof(int64_t))));
  ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
  std::vector<int64_t> dims;
  std::vector<float> y = test::output<float>(s.get(), 0, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{2, 1, 5}));
  ASSERT_EQ(y.size(), mask.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], static_cast<float>(mask[i]) * -2.0f) << i;
}

// y = Expand(b, [batch, 8]) + ConstantOfShape([batch, 8], 0.25), cond = x > 0,
// z = Where(cond, x, y) over x: f32[batch, 8], b: f32[8] (a weight): one tile kernel chain,
// no op calls.
TEST(LowerGenerators, ExpandConstantOfShapeAndWhereAreTileKernels) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 8});
  test::add_output(g, "z", Tp::FLOAT, {"batch", 8});
  std::vector<float> b(8);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * static_cast<float>(i);
  *g->add_initializer() = test::make_float_tensor("b", {8}, b);
  *g->add_initializer() = test::make_float_tensor("zero", {}, {0.0f});
  add_batch_shape(g, "x", 8, "shape");
  test::add_node(g, "Expand", {"b", "shape"}, {"e"});
  auto* cos = test::add_node(g, "ConstantOfShape", {"shape"}, {"c"});
  test::set_attr_tensor(cos, "value", test::make_float_tensor("v", {1}, {0.25f}));
  test::add_node(g, "Add", {"e", "c"}, {"y"});
  test::add_node(g, "Greater", {"x", "zero"}, {"cond"});
  test::add_node(g, "Where", {"cond", "x", "y"}, {"z"});
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 1) << "only the bool Greater (a comparison has no tile form yet)";
  EXPECT_EQ(c.lowered.skipped_nodes, 1) << "the SymbolicInts shape operand";
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  for (int64_t batch : {1, 3}) {
    std::vector<float> x(static_cast<size_t>(batch * 8));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(i);
    ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {batch, 8}, x)));
    ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    std::vector<float> z = test::output<float>(s.get(), 0, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{batch, 8}));
    ASSERT_EQ(z.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(z[i], x[i] > 0 ? x[i] : b[i % 8] + 0.25f) << i;
  }
}

// z = Transpose(x, perm) + 1 and w = Transpose(x) (reversed axes) over x: f32[batch, 3, 4, 5]:
// tile kernels that load through permuted strides, no op calls.
TEST(LowerGenerators, TransposeIsAPermutedLoad) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3, 4, 5});
  test::add_output(g, "z", Tp::FLOAT, {"batch", 4, 3, 5});
  test::add_output(g, "w", Tp::FLOAT, {5, 4, 3, "batch"});
  *g->add_initializer() = test::make_float_tensor("one", {}, {1.0f});
  test::set_attr_ints(test::add_node(g, "Transpose", {"x"}, {"t"}, "t"), "perm", {0, 2, 1, 3});
  test::add_node(g, "Add", {"t", "one"}, {"z"}, "add");
  test::add_node(g, "Transpose", {"x"}, {"w"}, "rev");
  Compiled c = compile(m);
  EXPECT_EQ(c.lowered.call_ops, 0);
  EXPECT_EQ(c.lowered.kernel_nodes.size(), 2u);
  test::ModelPtr model = test::load(c.package);
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 2);
  for (int64_t batch : {1, 2}) {
    std::vector<float> x(static_cast<size_t>(batch * 60));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {batch, 3, 4, 5}, x)));
    ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    std::vector<float> z = test::output<float>(s.get(), 0, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{batch, 4, 3, 5}));
    std::vector<float> w = test::output<float>(s.get(), 1, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{5, 4, 3, batch}));
    auto at = [&](int64_t b, int64_t i, int64_t j, int64_t k) { return x[static_cast<size_t>(((b * 3 + i) * 4 + j) * 5 + k)]; };
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t k = 0; k < 5; ++k) {
            EXPECT_EQ(z[static_cast<size_t>(((b * 4 + j) * 3 + i) * 5 + k)], at(b, i, j, k) + 1.0f);
            EXPECT_EQ(w[static_cast<size_t>(((k * 4 + j) * 3 + i) * batch + b)], at(b, i, j, k));
          }
  }
}

// The compile report's "not_fused": why a node is an op call, and why a kernel stopped growing.
TEST(LowerGenerators, NotFusedSaysWhy) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 8});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 8});
  test::add_output(g, "z", Tp::FLOAT, {"batch", 8});
  test::add_output(g, "s", Tp::FLOAT, {"batch", 8});
  test::add_node(g, "Relu", {"x"}, {"a"}, "relu");
  test::add_node(g, "Neg", {"a"}, {"y"}, "neg");
  test::add_node(g, "Abs", {"a"}, {"z"}, "abs");
  test::set_attr_int(test::add_node(g, "Softmax", {"x"}, {"s"}, "softmax"), "axis", -1);
  Compiled c = compile(m);
  std::map<std::string, std::vector<std::string>> why;
  for (const auto& f : c.lowered.not_fused) why[f.node].push_back(f.why);
  EXPECT_EQ(why["softmax"], std::vector<std::string>{"Softmax has no tile form yet"});
  EXPECT_EQ(why["neg"], std::vector<std::string>{"Relu 'relu' has 2 readers, so its value is stored and Neg 'neg' starts a new kernel"});
  EXPECT_EQ(why["abs"], std::vector<std::string>{"Relu 'relu' has 2 readers, so its value is stored and Abs 'abs' starts a new kernel"});
  EXPECT_EQ(why.count("relu"), 0u);
}

// `cuvilc inspect MODEL.onnx` lists the tile kernels with their nodes and what is not fused, why.
TEST(LowerGenerators, InspectShowsKernelsAndWhatIsNotFused) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 8});
  test::add_output(g, "s", Tp::FLOAT, {"batch", 8});
  test::add_node(g, "Relu", {"x"}, {"a"}, "relu");
  test::add_node(g, "Neg", {"a"}, {"n"}, "neg");
  test::set_attr_int(test::add_node(g, "Softmax", {"n"}, {"s"}, "softmax"), "axis", -1);
  test::TempDir dir;
  const std::string model = test::write_model(dir.path(), m, "m.onnx");
  test::RunResult r = test::run_tool(dir.path(), CUVIL_CUVILC, {"inspect", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tile kernels: 1\n  'relu' 'neg'\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not fused: 1\n  Softmax 'softmax': Softmax has no tile form yet\n"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cuvil
