// The shipped quick-GELU configs (configs/quick_gelu_fuse.yaml, configs/quick_gelu_silu.yaml):
// x * Sigmoid(1.702 x) after a MatMul, compiled with each config the way cuvilc does (rewrite
// patterns in canonicalize, fuse requests handed to lowering), runs and agrees with the model
// compiled without any config and without fusion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "options/compile_options.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::Tp;

// y = q * Sigmoid(1.702 q), q = MatMul(x, w): x f32[3, 6], y f32[3, 8].
onnx::ModelProto quick_gelu_after_matmul() {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {3, 6});
  test::add_output(g, "y", Tp::FLOAT, {3, 8});
  std::vector<float> w(6 * 8);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(static_cast<float>(i) * 0.37f);
  *g->add_initializer() = test::make_float_tensor("w", {6, 8}, w);
  *g->add_initializer() = test::make_float_tensor("k", {}, {1.702f});
  test::add_node(g, "MatMul", {"x", "w"}, {"q"}, "mm");
  test::add_node(g, "Mul", {"q", "k"}, {"a"}, "m1");
  test::add_node(g, "Sigmoid", {"a"}, {"s"}, "sig");
  test::add_node(g, "Mul", {"q", "s"}, {"y"}, "m2");
  return m;
}

struct Compiled {
  Model ir;
  codegen::LoweredModel lowered;
  std::vector<uint8_t> package;
};

// What `cuvilc compile --config` does with the config's patterns and fusion setting.
Compiled compile_with(const onnx::ModelProto& m, const CompileOptions& options) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  Compiled c{frontend::import_onnx_bytes(bytes, "", {}, "quick_gelu.onnx"), {}, {}};
  verify_model(c.ir);
  PipelineOptions po;
  po.context.user_patterns = options.patterns;
  run_passes(c.ir, po);
  frontend::check_supported(c.ir);
  codegen::LowerOptions lo;
  lo.fuse_elementwise = options.fusion;
  for (const Pattern& p : options.patterns)
    if (p.action == Pattern::Action::Fuse)
      for (const auto& names : find_matches(c.ir, p)) lo.fuse.push_back({p.name, names});
  c.lowered = codegen::lower_model(c.ir, lo);
  c.package = codegen::build_package(c.ir, c.lowered);
  return c;
}

std::vector<float> run(const std::vector<uint8_t>& package, const std::vector<float>& x) {
  test::ModelPtr model = test::load(package);
  if (!model) return {};
  test::SessionPtr s = test::open_session(model.get(), 2);
  EXPECT_TRUE(test::Ok(test::set_f32(s.get(), "x", {3, 6}, x)));
  EXPECT_TRUE(test::Ok(cuvil_session_run(s.get())));
  return test::output<float>(s.get(), 0);
}

int count_tile_opcode(const rt::Program& p, rt::TileOpcode op) {
  int n = 0;
  for (const rt::TileKernel& k : p.kernels)
    for (size_t pc = 0; pc < k.body.size();) {
      if (k.body[pc] == static_cast<uint32_t>(op)) ++n;
      pc += 1 + std::strlen(rt::tile_opcode_operands(static_cast<rt::TileOpcode>(k.body[pc])));
    }
  return n;
}

CompileOptions shipped(const char* name) {
  return load_config_file(std::string(CUVIL_SOURCE_DIR) + "/configs/" + name);
}

TEST(QuickGeluConfigs, FuseAndSiLURewriteAgreeWithUnfused) {
  std::vector<float> x(18);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  for (float& v : x) v = dist(rng);
  CompileOptions plain;
  plain.fusion = false;
  const std::vector<float> reference = run(compile_with(quick_gelu_after_matmul(), plain).package, x);
  ASSERT_EQ(reference.size(), 24u);

  // fuse: the three nodes stay and land in one tile kernel, the MatMul's: its result has two
  // readers (m1, m2), but both are in the request, so the value stays in a register.
  Compiled fused = compile_with(quick_gelu_after_matmul(), shipped("quick_gelu_fuse.yaml"));
  ASSERT_EQ(fused.lowered.kernel_nodes.size(), 1u);
  EXPECT_EQ(fused.lowered.kernel_nodes[0], (std::vector<std::string>{"mm", "m1", "sig", "m2"}));

  // rewrite: one cuvil::SiLU with alpha 1.702 (one reader of the MatMul's result now), fused
  // into the MatMul's kernel as a Silu instruction.
  Compiled silu = compile_with(quick_gelu_after_matmul(), shipped("quick_gelu_silu.yaml"));
  ASSERT_EQ(silu.ir.graph->nodes.size(), 2u);
  const Node& n = silu.ir.graph->nodes[1];
  EXPECT_EQ(n.domain, "cuvil");
  EXPECT_EQ(n.op_type, "SiLU");
  EXPECT_FLOAT_EQ(n.attr_float("alpha", 0), 1.702f);
  ASSERT_EQ(silu.lowered.kernel_nodes.size(), 1u);
  EXPECT_EQ(silu.lowered.kernel_nodes[0], (std::vector<std::string>{"mm", "m2"}));
  EXPECT_EQ(count_tile_opcode(silu.lowered.program, rt::TileOpcode::Silu), 1);
  EXPECT_EQ(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Silu), 0);

  // ... and as a whole-tensor kernel call, with fusion off.
  CompileOptions silu_unfused = shipped("quick_gelu_silu.yaml");
  silu_unfused.fusion = false;
  Compiled silu_call = compile_with(quick_gelu_after_matmul(), silu_unfused);
  EXPECT_EQ(silu_call.lowered.kernel_nodes.size(), 0u);

  for (const Compiled* c : {&fused, &silu, &silu_call}) {
    const std::vector<float> y = run(c->package, x);
    ASSERT_EQ(y.size(), reference.size());
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_NEAR(y[i], reference[i], 1e-5 + 1e-4 * std::fabs(reference[i])) << "element " << i;
  }
}

// A fuse pattern naming a cuvil op: quick GELU after a linear layer (MatMul + bias Add, which
// fuse-epilogues makes one cuvil::FusedMatMul) matched as FusedMatMul -> Mul -> Sigmoid -> Mul
// becomes one kernel, the FusedMatMul's, and agrees with the unfused compile.
TEST(QuickGeluConfigs, FusePatternMatchesAFusedMatMul) {
  onnx::ModelProto m = quick_gelu_after_matmul();
  auto* g = m.mutable_graph();
  *g->add_initializer() = test::make_float_tensor("b", {8}, {0.5f, -0.25f, 1.f, 0.f, -1.f, 0.125f, 2.f, -0.5f});
  g->mutable_node(0)->set_output(0, "mm_out");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->set_name("bias");
  add->add_input("mm_out");
  add->add_input("b");
  add->add_output("q");
  // Keep the nodes in topological order: the Add right after the MatMul.
  for (int i = g->node_size() - 1; i > 1; --i) g->mutable_node()->SwapElements(i, i - 1);
  const CompileOptions config = parse_config(
      "patterns:\n  - name: linear_quick_gelu\n    action: fuse\n    match:\n"
      "      - {op: cuvil::FusedMatMul, inputs: [x, w, b], output: q}\n"
      "      - {op: Mul, inputs: [q, k], output: a}\n"
      "      - {op: Sigmoid, inputs: [a], output: s}\n"
      "      - {op: Mul, inputs: [q, s], output: y}\n"
      "    constants: {k: {value: 1.702, tolerance: 1e-4}}\n",
      "c.yaml");
  Compiled fused = compile_with(m, config);
  ASSERT_EQ(fused.lowered.kernel_nodes.size(), 1u);
  EXPECT_EQ(fused.lowered.kernel_nodes[0].size(), 4u);
  EXPECT_EQ(fused.lowered.call_ops, 0);
  CompileOptions plain;
  plain.fusion = false;
  std::vector<float> x(18);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 1.5f;
  const std::vector<float> reference = run(compile_with(m, plain).package, x);
  const std::vector<float> y = run(fused.package, x);
  ASSERT_EQ(y.size(), reference.size());
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], reference[i], 1e-5 + 1e-4 * std::fabs(reference[i])) << "element " << i;
}

}  // namespace
}  // namespace cuvil
