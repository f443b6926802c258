// Pass loop_sequences_to_scans (suite LoopSequences): the `outs.append(t)` ... `stack(outs)`
// pattern exporters emit (SequenceEmpty carried through a Loop, SequenceInsert in the body,
// ConcatFromSequence(new_axis=1) after it) compiles to a Loop scan output and runs; other
// carried values and scan outputs keep their order; a sequence used any other way is left
// alone (and the compiler then lists the sequence ops as unsupported).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "passes/loop_sequences.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using Tp = onnx::TensorProto;
using test::compile;
using test::load;
using test::ModelPtr;
using test::Ok;
using test::open_session;
using test::output;
using test::SessionPtr;
using test::set_f32;

using test::typed;

// for i in range(M): h = h + x; outs.append(h * i); also a scan output h; return h, stack(outs), scanned
// `extra_use` adds SequenceLength(final sequence) as another output, which must block the rewrite.
onnx::ModelProto append_model(bool extra_use) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {2});
  g->add_initializer()->CopyFrom(test::make_int64_tensor("M", {}, {3}));
  g->add_initializer()->CopyFrom(test::make_float_tensor("h0", {2}, {0, 0}));
  test::set_attr_int(test::add_node(g, "SequenceEmpty", {}, {"seq0"}, "empty"), "dtype", Tp::FLOAT);
  auto* n = test::add_node(g, "Loop", {"M", "", "h0", "seq0"}, {"h", "seq", "scanned"}, "loop");
  auto* b = test::set_attr_graph(n, "body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "c", Tp::BOOL);
  typed(b->add_input(), "h_in", Tp::FLOAT);
  b->add_input()->set_name("seq_in");
  b->mutable_input(3)->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
  test::add_node(b, "Add", {"h_in", "x"}, {"h_out"}, "add");
  test::set_attr_int(test::add_node(b, "Cast", {"i"}, {"fi"}, "cast"), "to", Tp::FLOAT);
  test::add_node(b, "Mul", {"h_out", "fi"}, {"t"}, "mul");
  test::add_node(b, "SequenceInsert", {"seq_in", "t"}, {"seq_out"}, "insert");
  test::add_node(b, "Identity", {"h_out"}, {"h_scan"}, "scan");
  typed(b->add_output(), "c", Tp::BOOL);
  typed(b->add_output(), "h_out", Tp::FLOAT);
  b->add_output()->set_name("seq_out");
  b->mutable_output(2)->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
  typed(b->add_output(), "h_scan", Tp::FLOAT);
  auto* stack = test::add_node(g, "ConcatFromSequence", {"seq"}, {"stacked"}, "stack");
  test::set_attr_int(stack, "axis", 0);
  test::set_attr_int(stack, "new_axis", 1);
  test::add_output(g, "h", Tp::FLOAT, {2});
  typed(g->add_output(), "stacked", Tp::FLOAT);
  typed(g->add_output(), "scanned", Tp::FLOAT);
  if (extra_use) {
    test::add_node(g, "SequenceLength", {"seq"}, {"len"}, "length");
    typed(g->add_output(), "len", Tp::INT64);
  }
  return m;
}

TEST(LoopSequences, AppendThenStackBecomesAScanOutput) {
  for (bool fuse : {true, false}) {
    ModelPtr model = load(compile(append_model(false), {}, fuse));
    ASSERT_TRUE(model);
    SessionPtr s = open_session(model.get());
    const std::vector<float> x = {1, 10};
    ASSERT_TRUE(Ok(set_f32(s.get(), "x", {2}, x)));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    std::vector<float> h = {0, 0}, stacked, scanned;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 2; ++k) {
        h[k] += x[k];
        stacked.push_back(h[k] * static_cast<float>(i));
        scanned.push_back(h[k]);
      }
    std::vector<int64_t> dims;
    EXPECT_EQ(output<float>(s.get(), 0), h);
    EXPECT_EQ(output<float>(s.get(), 1, &dims), stacked);
    EXPECT_EQ(dims, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(output<float>(s.get(), 2, &dims), scanned);
    EXPECT_EQ(dims, (std::vector<int64_t>{3, 2}));
  }
}

TEST(LoopSequences, RewriteLeavesNoSequenceOps) {
  std::string bytes;
  append_model(false).SerializeToString(&bytes);
  Model m = frontend::import_onnx_bytes(bytes, "", {}, "append.onnx");
  loop_sequences_to_scans(m);
  verify_model(m);
  const Graph& g = *m.graph;
  for (const Node& n : g.nodes) EXPECT_NE(op_flags(n.op) & kSequenceTypes, kSequenceTypes) << n.op_type;
  const Node& loop = g.nodes[0];
  ASSERT_EQ(loop.op_type, "Loop");
  EXPECT_EQ(loop.inputs.size(), 3u);   // M, cond, h0
  EXPECT_EQ(loop.outputs.size(), 3u);  // h, scanned, stacked
  EXPECT_EQ(g.value(loop.outputs[1]).name, "scanned");
  EXPECT_EQ(g.value(loop.outputs[2]).name, "seq");
  const Graph& body = *loop.attrs.at("body").g;
  EXPECT_EQ(body.inputs.size(), 3u);
  ASSERT_EQ(body.outputs.size(), 4u);  // cond, h_out, h_scan, t
  EXPECT_EQ(body.value(body.outputs[3]).name, "t");
}

TEST(LoopSequences, OtherUsesOfTheSequenceBlockTheRewrite) {
  std::string bytes;
  append_model(true).SerializeToString(&bytes);
  Model m = frontend::import_onnx_bytes(bytes, "", {}, "append.onnx");
  loop_sequences_to_scans(m);
  verify_model(m);
  EXPECT_EQ(m.graph->nodes[1].op_type, "Loop");
  EXPECT_EQ(m.graph->nodes[1].inputs.size(), 4u);  // untouched
  EXPECT_TRUE(test::FailsWith([] { compile(append_model(true)); }, ExitCode::kUnsupported, {"SequenceLength"}));
}

}  // namespace
}  // namespace cuvil
