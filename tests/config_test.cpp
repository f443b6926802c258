// The YAML config reader (options/config_file.cpp): a good config fills CompileOptions; every
// kind of bad config is a usage error with the exact message, FILE:LINE:COLUMN first; cuvilc
// reads --config and lets the command line override it.
#include <gtest/gtest.h>

#include <fstream>

#include "options/compile_options.h"
#include "run_tool.h"

namespace cuvil {
namespace {

std::string config_error(const std::string& text) {
  try {
    parse_config(text, "c.yaml");
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kUsage) << d.what();
    return d.what();
  }
  ADD_FAILURE() << "config accepted:\n" << text;
  return "";
}

TEST(Config, EmptyFileSetsNothing) {
  CompileOptions o = parse_config("", "c.yaml");
  EXPECT_TRUE(o.dims.empty());
  EXPECT_TRUE(o.fusion);
  EXPECT_EQ(o.layout, LayoutChoice::kAuto);
  EXPECT_EQ(o.kv_cache, KvCacheMode::kAuto);
  EXPECT_EQ(o.limits.max_nodes, CompileLimits{}.max_nodes);
  EXPECT_EQ(parse_config("kv_cache: off\n", "c.yaml").kv_cache, KvCacheMode::kOff);
  EXPECT_EQ(parse_config("kv_cache: on\n", "c.yaml").kv_cache, KvCacheMode::kOn);
  o = parse_config("# only a comment\n", "c.yaml");
  EXPECT_TRUE(o.dims.empty());
}

TEST(Config, EverySettingIsRead) {
  CompileOptions o = parse_config(
      "version: 1\n"
      "dims:\n"
      "  batch: 1:8\n"
      "  seq: \"16:\"\n"
      "  heads: 12\n"
      "fusion: false\n"
      "layout: nhwc\n"
      "limits:\n"
      "  max_nodes: 5000\n"
      "  max_fold_elements: 0\n",
      "c.yaml");
  ASSERT_EQ(o.dims.size(), 3u);
  EXPECT_EQ(o.dims[0].first, "batch");
  EXPECT_EQ(o.dims[0].second.lo, 1);
  EXPECT_EQ(o.dims[0].second.hi, 8);
  EXPECT_EQ(o.dims[1].first, "seq");
  EXPECT_EQ(o.dims[1].second.lo, 16);
  EXPECT_EQ(o.dims[1].second.hi, sym::Range::kUnbounded);
  EXPECT_EQ(o.dims[2].second.lo, 12);
  EXPECT_EQ(o.dims[2].second.hi, 12);
  EXPECT_FALSE(o.fusion);
  EXPECT_EQ(o.layout, LayoutChoice::kNhwc);
  EXPECT_EQ(o.limits.max_nodes, 5000);
  EXPECT_EQ(o.limits.max_fold_elements, 0);
  EXPECT_EQ(o.limits.max_nesting_depth, CompileLimits{}.max_nesting_depth);
}

TEST(Config, EveryLimitHasAYamlKey) {
  for (size_t i = 0; i < static_cast<size_t>(LimitId::kCount); ++i) {
    const LimitInfo& info = limit_info(static_cast<LimitId>(i));
    CompileOptions o = parse_config(std::string("limits:\n  ") + info.yaml_key + ": 7\n", "c.yaml");
    EXPECT_EQ(limit_value(o.limits, static_cast<LimitId>(i)), 7) << info.yaml_key;
  }
}

TEST(Config, UnknownTopLevelKey) {
  EXPECT_EQ(config_error("fusion: true\nfusoin: false\n"),
            "c.yaml:2:1: unknown key 'fusoin' (known: version, buckets, dims, freeze, fusion, kv_cache, layout, limits, patterns, quantize)");
}

TEST(Config, UnknownLimitKey) {
  EXPECT_EQ(config_error("limits:\n  max_node: 3\n"),
            "c.yaml:2:3: unknown key 'limits.max_node' (known under 'limits': max_nodes, "
            "max_inlined_nodes, max_inlined_bytes, max_nesting_depth, max_tensor_elements, "
            "max_fold_elements)");
}

TEST(Config, WrongTypes) {
  EXPECT_EQ(config_error("limits:\n  max_nodes: lots\n"),
            "c.yaml:2:14: limits.max_nodes: expected a non-negative integer, got 'lots'");
  EXPECT_EQ(config_error("limits:\n  max_nodes: -1\n"),
            "c.yaml:2:14: limits.max_nodes: expected a non-negative integer, got '-1'");
  EXPECT_EQ(config_error("limits:\n  max_nodes: 99999999999999999999\n"),
            "c.yaml:2:14: limits.max_nodes: expected a non-negative integer, got '99999999999999999999'");
  EXPECT_EQ(config_error("limits:\n  max_nodes: [1, 2]\n"),
            "c.yaml:2:14: limits.max_nodes: expected a non-negative integer, got a list");
  EXPECT_EQ(config_error("fusion: yes please\n"), "c.yaml:1:9: fusion: expected true or false, got 'yes please'");
  EXPECT_EQ(config_error("layout: NHWC\n"), "c.yaml:1:9: layout: expected auto, nchw or nhwc, got 'NHWC'");
  EXPECT_EQ(config_error("kv_cache: yes\n"), "c.yaml:1:11: kv_cache: expected auto, on or off, got 'yes'");
  EXPECT_EQ(config_error("limits: 5\n"), "c.yaml:1:9: limits must be a mapping (key: value), got a scalar");
  EXPECT_EQ(config_error("- a\n- b\n"), "c.yaml:1:1: the config must be a mapping (key: value), got a list");
}

TEST(Config, Buckets) {
  CompileOptions o = parse_config("buckets:\n  seq: [1, 16, 128]\n  batch: pow2\n", "c.yaml");
  ASSERT_EQ(o.buckets.size(), 2u);
  EXPECT_EQ(o.buckets[0].symbol, "seq");
  EXPECT_EQ(o.buckets[0].bounds, (std::vector<int64_t>{1, 16, 128}));
  EXPECT_FALSE(o.buckets[0].pow2);
  EXPECT_EQ(o.buckets[1].symbol, "batch");
  EXPECT_TRUE(o.buckets[1].pow2);
  EXPECT_TRUE(parse_config("buckets: auto\n", "c.yaml").buckets.empty());
  EXPECT_EQ(config_error("buckets:\n  seq: [16, 4]\n"),
            "c.yaml:2:8: buckets.seq: bucket bounds of 'seq' must increase: 4 after 16 (in 'seq=16,4')");
  EXPECT_EQ(config_error("buckets:\n  seq: [1, x]\n"),
            "c.yaml:2:8: buckets.seq: bucket bound 'x' of 'seq' is not a non-negative integer (in 'seq=1,x')");
  EXPECT_EQ(config_error("buckets: some\n"), "c.yaml:1:10: buckets: expected auto or a map of symbol: bounds, got 'some'");
}

TEST(Config, BadDims) {
  EXPECT_EQ(config_error("dims:\n  seq: 8:1\n"),
            "c.yaml:2:8: dims.seq: expected N, lo:hi or lo: (non-negative integers, lo <= hi), got '8:1'");
  EXPECT_EQ(config_error("dims:\n  seq: {lo: 1}\n"), "c.yaml:2:8: dims.seq: expected N, lo:hi or lo:, got a mapping");
  EXPECT_EQ(config_error("dims: [batch]\n"), "c.yaml:1:7: dims must be a mapping (key: value), got a list");
}

TEST(Config, DuplicateKey) {
  EXPECT_EQ(config_error("limits:\n  max_nodes: 1\n  max_nodes: 2\n"), "c.yaml:3:3: duplicate key 'limits.max_nodes'");
}

TEST(Config, VersionMismatch) {
  EXPECT_EQ(config_error("version: 2\n"), "c.yaml:1:10: version: this cuvilc reads config version 1, the file says 2");
}

TEST(Config, SyntaxError) {
  const std::string msg = config_error("limits:\n  max_nodes: [1,\n");
  EXPECT_EQ(msg.rfind("c.yaml:", 0), 0u) << msg;
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
}

TEST(Config, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '[');
  const std::string msg = config_error(deep);
  EXPECT_NE(msg.find("c.yaml"), std::string::npos) << msg;
}

TEST(Config, Files) {
  test::TempDir dir;
  try {
    load_config_file(dir.path() + "/missing.yaml");
    ADD_FAILURE() << "missing file accepted";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kIo);
    EXPECT_EQ(std::string(d.what()),
              "cannot read config '" + dir.path() + "/missing.yaml': No such file or directory");
  }
  try {
    load_config_file(dir.path());
    ADD_FAILURE() << "directory accepted";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kIo);
    EXPECT_EQ(std::string(d.what()), "cannot read config '" + dir.path() + "': not a regular file");
  }
  const std::string path = dir.path() + "/ok.yaml";
  std::ofstream(path) << "fusion: false\n";
  EXPECT_FALSE(load_config_file(path).fusion);
}

// `freeze:` keeps each input's value as written, with where it was given; a later entry for
// the same input (the command line's) replaces it.
TEST(Config, FreezeKeyKeepsValueAndOrigin) {
  CompileOptions o = parse_config("freeze:\n  sr: 16000\n  mask: m.npy\n", "c.yaml");
  ASSERT_EQ(o.freeze.size(), 2u);
  EXPECT_EQ(o.freeze[0].input, "sr");
  EXPECT_EQ(o.freeze[0].value, "16000");
  EXPECT_EQ(o.freeze[0].origin, "c.yaml:2:7: freeze.sr");
  EXPECT_EQ(o.freeze[1].value, "m.npy");
  set_freeze(o, FreezeSpec{"sr", "8000", "--freeze sr"});
  ASSERT_EQ(o.freeze.size(), 2u);
  EXPECT_EQ(o.freeze[0].value, "8000");
  EXPECT_EQ(o.freeze[0].origin, "--freeze sr");
}

// Every example in configs/ parses: they are documentation and must stay true.
TEST(Config, ShippedExamplesParse) {
  for (const char* name : {"example.yaml", "quick_gelu_fuse.yaml", "quick_gelu_silu.yaml"}) {
    const std::string path = std::string(CUVIL_SOURCE_DIR) + "/configs/" + name;
    EXPECT_NO_THROW(load_config_file(path)) << path;
  }
}

// cuvilc: --config is read, a bad config exits 2 naming the line, and --dim overrides the
// config's range for the same symbol.
// `layout:` reaches pass choose-layout, and --layout overrides it.
TEST(Config, CuvilcLayoutKeyAndOptionReachChooseLayout) {
  test::TempDir dir;
  onnx::ModelProto m = test::make_model();
  test::add_input(m.mutable_graph(), "x", onnx::TensorProto::FLOAT, {1, 2, 4, 4});
  test::add_output(m.mutable_graph(), "y", onnx::TensorProto::FLOAT, {1, 2, 4, 4});
  *m.mutable_graph()->add_initializer() = test::make_float_tensor("w", {2, 2, 1, 1}, {1, 2, 3, 4});
  test::add_node(m.mutable_graph(), "Conv", {"x", "w"}, {"y"});
  const std::string model = test::write_model(dir.path(), m, "m.onnx");
  const std::string cfg = dir.path() + "/c.yaml";
  std::ofstream(cfg) << "layout: nhwc\n";
  auto ir = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"compile", model, "--stop-after", "choose-layout"};
    args.insert(args.end(), extra.begin(), extra.end());
    test::RunResult r = test::run_tool(dir.path(), CUVIL_CUVILC, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(ir({}).find("NHWC"), std::string::npos);  // default nchw
  EXPECT_NE(ir({"--config", cfg}).find("layout = \"NHWC\""), std::string::npos);
  EXPECT_NE(ir({"--layout", "nhwc"}).find("Transpose"), std::string::npos);
  EXPECT_EQ(ir({"--config", cfg, "--layout", "nchw"}).find("NHWC"), std::string::npos);
  EXPECT_EQ(ir({"--layout", "auto"}).find("NHWC"), std::string::npos);  // one conv: under 3
  test::RunResult r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--layout", "NHWC"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--layout"), std::string::npos) << r.err;
}

TEST(Config, CuvilcReadsConfigAndCommandLineOverrides) {
  test::TempDir dir;
  onnx::ModelProto m = test::make_model();
  test::add_input(m.mutable_graph(), "x", onnx::TensorProto::FLOAT, {"batch", 4});
  test::add_output(m.mutable_graph(), "y", onnx::TensorProto::FLOAT, {"batch", 4});
  test::add_node(m.mutable_graph(), "Relu", {"x"}, {"y"});
  const std::string model = test::write_model(dir.path(), m, "m.onnx");
  const std::string cfg = dir.path() + "/c.yaml";
  std::ofstream(cfg) << "dims:\n  batch: 2:6\n";
  test::RunResult r = test::run_tool(dir.path(), CUVIL_CUVILC, {"inspect", model, "--config", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("batch in [2, 6]"), std::string::npos) << r.out;
  r = test::run_tool(dir.path(), CUVIL_CUVILC, {"inspect", model, "--config", cfg, "--dim", "batch=3:5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("batch in [3, 5]"), std::string::npos) << r.out;

  // The config is an input too: an output over it is refused and the config stays.
  r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--config", cfg, "-o", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("names the same file as the config"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_bytes(cfg), "dims:\n  batch: 2:6\n");

  std::ofstream(cfg) << "dims:\n  batch: x\n";
  r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--config", cfg, "-o", dir.path() + "/m.cuvir"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(cfg + ":2:10: dims.batch: expected N, lo:hi or lo:"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cuvil

namespace cuvil {
namespace {

constexpr const char* kQuickGeluFuse =
    "patterns:\n"
    "  - name: quick_gelu\n"
    "    action: fuse\n"
    "    match:\n"
    "      - {op: Mul, inputs: [x, k], output: a}\n"
    "      - {op: Sigmoid, inputs: [a], output: s}\n"
    "      - {op: Mul, inputs: [x, s], output: y}\n"
    "    constants:\n"
    "      k: {value: 1.702, tolerance: 1e-4}\n";

TEST(ConfigPatterns, AreRead) {
  CompileOptions o = parse_config(std::string(kQuickGeluFuse) +
                                      "  - name: relu_relu\n"
                                      "    action: rewrite\n"
                                      "    match:\n"
                                      "      - {op: Relu, inputs: [x], output: a}\n"
                                      "      - {op: Relu, inputs: [a], output: b}\n"
                                      "    rewrite: {op: Relu, opset: 14, inputs: [x], attributes: {note: 3, scale: 0.5, "
                                      "how: fast}}\n",
                                  "c.yaml");
  ASSERT_EQ(o.patterns.size(), 2u);
  const Pattern& q = o.patterns[0];
  EXPECT_EQ(q.action, Pattern::Action::Fuse);
  EXPECT_EQ(q.nodes.size(), 3u);
  EXPECT_EQ(q.root, "y");
  EXPECT_DOUBLE_EQ(q.constants.at("k").value, 1.702);
  EXPECT_DOUBLE_EQ(q.constants.at("k").tolerance, 1e-4);
  const Pattern& r = o.patterns[1];
  EXPECT_EQ(r.action, Pattern::Action::Rewrite);
  EXPECT_EQ(r.rewrite_op, "Relu");
  EXPECT_EQ(r.rewrite_opset, 14);
  ASSERT_EQ(r.rewrite_attrs.size(), 3u);
  EXPECT_EQ(r.rewrite_attrs[0].kind, PatternAttr::Kind::Int);
  EXPECT_EQ(r.rewrite_attrs[1].kind, PatternAttr::Kind::Float);
  EXPECT_EQ(r.rewrite_attrs[2].kind, PatternAttr::Kind::String);
}

// `op: cuvil::Name` in a match names one of cuvil's fused ops: fuse and keep patterns see the
// graph after all passes, where cuvil::FusedMatMul and cuvil::Attention exist; a rewrite runs
// in canonicalize, before they do, so a rewrite matching them is refused.
TEST(ConfigPatterns, MatchNamesAFusedOp) {
  CompileOptions o = parse_config("patterns:\n  - name: mm_then_square\n    action: fuse\n    match:\n"
                                  "      - {op: cuvil::FusedMatMul, inputs: [a, w, b], output: y}\n"
                                  "      - {op: Mul, inputs: [y, y], output: z}\n",
                                  "c.yaml");
  ASSERT_EQ(o.patterns.size(), 1u);
  EXPECT_EQ(o.patterns[0].nodes[0].domain, "cuvil");
  EXPECT_EQ(o.patterns[0].nodes[0].op, "FusedMatMul");
  EXPECT_EQ(o.patterns[0].nodes[1].domain, "");
  // SiLU is made by canonicalize's built-in rules, before the user's rewrites: allowed.
  o = parse_config("patterns:\n  - name: silu_twice\n    action: rewrite\n    match:\n"
                   "      - {op: cuvil::SiLU, inputs: [x], output: y}\n"
                   "      - {op: Relu, inputs: [y], output: z}\n"
                   "    rewrite: {op: Relu, opset: 14, inputs: [x]}\n",
                   "c.yaml");
  EXPECT_EQ(o.patterns[0].nodes[0].domain, "cuvil");
}

TEST(ConfigPatterns, BadFusedOpMatches) {
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: keep\n    match:\n"
                         "      - {op: cuvil::Frob, inputs: [x], output: y}\n"),
            "c.yaml:5:14: patterns[0].match[0].op: unknown op 'cuvil::Frob'");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: keep\n    match:\n"
                         "      - {op: 'onnx::Relu', inputs: [x], output: y}\n"),
            "c.yaml:5:14: patterns[0].match[0].op: unknown op 'onnx::Relu'");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: rewrite\n    match:\n"
                         "      - {op: cuvil::FusedMatMul, inputs: [a, w, b], output: y}\n"
                         "      - {op: Relu, inputs: [y], output: z}\n"
                         "    rewrite: {op: Relu, opset: 14, inputs: [a]}\n"),
            "c.yaml:2:5: patterns[0]: pattern 'p': a rewrite runs in the canonicalize pass, before any "
            "cuvil::FusedMatMul exists (the fuse-epilogues pass makes it later); match it with action fuse or "
            "keep, which see the graph after all passes");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: rewrite\n    match:\n"
                         "      - {op: cuvil::Attention, inputs: [q, k, v], output: y}\n"
                         "    rewrite: {op: Relu, opset: 14, inputs: [q]}\n"),
            "c.yaml:2:5: patterns[0]: pattern 'p': a rewrite runs in the canonicalize pass, before any "
            "cuvil::Attention exists (the fuse-attention pass makes it later); match it with action fuse or "
            "keep, which see the graph after all passes");
}

// `op: cuvil::Name` rewrites to one of cuvil's fused ops, which needs no opset.
TEST(ConfigPatterns, RewriteToAFusedOp) {
  CompileOptions o = parse_config("patterns:\n  - name: quick_gelu\n    action: rewrite\n    match:\n"
                                  "      - {op: Mul, inputs: [x, k], output: a}\n"
                                  "      - {op: Sigmoid, inputs: [a], output: s}\n"
                                  "      - {op: Mul, inputs: [x, s], output: y}\n"
                                  "    constants: {k: 1.702}\n"
                                  "    rewrite: {op: cuvil::SiLU, inputs: [x], attributes: {alpha: {constant: k}}}\n",
                                  "c.yaml");
  ASSERT_EQ(o.patterns.size(), 1u);
  EXPECT_EQ(o.patterns[0].rewrite_domain, "cuvil");
  EXPECT_EQ(o.patterns[0].rewrite_op, "SiLU");
  EXPECT_EQ(check_pattern(o.patterns[0]), "");
}

TEST(ConfigPatterns, BadPatterns) {
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: fuse\n    match:\n      - {op: Frob, inputs: [x], output: y}\n"),
            "c.yaml:5:14: patterns[0].match[0].op: unknown op 'Frob'");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    match:\n      - {op: Relu, inputs: [x], output: y}\n"),
            "c.yaml:2:5: patterns[0]: pattern 'p' needs an 'action' (fuse, rewrite or keep)");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: melt\n"),
            "c.yaml:3:13: patterns[0].action: expected fuse, rewrite or keep, got 'melt'");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: fuse\n    match:\n      - {op: Relu, input: [x], output: y}\n"),
            "c.yaml:5:20: unknown key 'patterns[0].match[0].input' (known under 'patterns[0].match[0]': op, inputs, "
            "output, reduce_last_axis)");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: rewrite\n    match:\n      - {op: Relu, inputs: [x], output: y}\n"
                         "    rewrite: {op: Relu, inputs: [x]}\n"),
            "c.yaml:6:14: patterns[0].rewrite: a rewrite needs 'opset' (the ONNX opset the new node follows)");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: rewrite\n    match:\n      - {op: Relu, inputs: [x], output: y}\n"
                         "    rewrite: {op: cuvil::Frob, inputs: [x]}\n"),
            "c.yaml:6:19: patterns[0].rewrite.op: unknown op 'cuvil::Frob'");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: keep\n    root: z\n    match:\n"
                         "      - {op: Relu, inputs: [x], output: y}\n"),
            "c.yaml:2:5: patterns[0]: pattern 'p': root 'z' is no node's output");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: rewrite\n    match:\n      - {op: Relu, inputs: [x], output: y}\n"
                         "    rewrite: {op: Relu, opset: 14, inputs: [q]}\n"),
            "c.yaml:2:5: patterns[0]: pattern 'p': rewrite input 'q' is not an input variable of the match");
  EXPECT_EQ(config_error("patterns:\n  - name: p\n    action: keep\n    match:\n      - {op: Relu, inputs: [x], output: y}\n"
                         "    constants: {x: lots}\n"),
            "c.yaml:6:20: patterns[0].constants.x: expected a number, got 'lots'");
}

// x * Sigmoid(1.702 * x) over x: f32[2, 8]; node names m1, sig, m2.
onnx::ModelProto quick_gelu_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", onnx::TensorProto::FLOAT, {2, 8});
  test::add_output(g, "y", onnx::TensorProto::FLOAT, {2, 8});
  *g->add_initializer() = test::make_float_tensor("k", {}, {1.702f});
  test::add_node(g, "Mul", {"x", "k"}, {"a"}, "m1");
  test::add_node(g, "Sigmoid", {"a"}, {"s"}, "sig");
  test::add_node(g, "Mul", {"x", "s"}, {"y"}, "m2");
  return m;
}

TEST(ConfigPatterns, FuseKeepAndRewriteReachTheCompile) {
  test::TempDir dir;
  const std::string model = test::write_model(dir.path(), quick_gelu_model(), "m.onnx");
  const std::string cfg = dir.file("c.yaml"), report = dir.file("r.json"), out = dir.file("m.cuvir");
  std::ofstream(cfg) << kQuickGeluFuse;
  test::RunResult r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--config", cfg, "-o", out, "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string json = test::read_bytes(report);
  EXPECT_NE(json.find("\"quick_gelu\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("[\"m1\", \"sig\", \"m2\"]"), std::string::npos) << json;

  // keep the Sigmoid out of any kernel: the fuse request cannot hold, and says why.
  std::ofstream(cfg) << kQuickGeluFuse
                     << "  - name: no_sigmoid\n    action: keep\n    match:\n      - {op: Sigmoid, inputs: [a], output: s}\n";
  r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--config", cfg, "-o", out});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("pattern 'quick_gelu' asks to fuse 'm1', 'sig', 'm2' into one tile kernel, but node 'sig' "
                       "(Sigmoid) has no tile form here (a keep pattern names it)"),
            std::string::npos)
      << r.err;

  // A user rewrite: Sigmoid(a) -> HardSigmoid(a) (not the same function: the IR shows it happened).
  std::ofstream(cfg) << "patterns:\n  - name: hard\n    action: rewrite\n    match:\n"
                        "      - {op: Sigmoid, inputs: [a], output: s}\n"
                        "    rewrite: {op: HardSigmoid, opset: 6, inputs: [a], attributes: {alpha: 0.25}}\n";
  r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--config", cfg, "--emit", "ir"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("HardSigmoid<6>(%a) {alpha = 0.25f} @\"sig\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Sigmoid<"), r.out.find("HardSigmoid<") + 4) << r.out;
}

// a = x + 1; y = a * Tanh(a): `a` has two readers, so the greedy rule makes two kernels
// (storing `a`); a fuse request naming all three nodes keeps `a` in a register of one kernel.
TEST(ConfigPatterns, FuseRequestKeepsADiamondInOneKernel) {
  test::TempDir dir;
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", onnx::TensorProto::FLOAT, {2, 8});
  test::add_output(g, "y", onnx::TensorProto::FLOAT, {2, 8});
  *g->add_initializer() = test::make_float_tensor("one", {}, {1.0f});
  test::add_node(g, "Add", {"x", "one"}, {"a"}, "add");
  test::add_node(g, "Tanh", {"a"}, {"s"}, "tanh");
  test::add_node(g, "Mul", {"a", "s"}, {"y"}, "mul");
  const std::string model = test::write_model(dir.path(), m, "m.onnx");
  const std::string cfg = dir.file("c.yaml"), report = dir.file("r.json");
  auto kernels = [&](bool with_request) {
    std::ofstream(cfg) << (with_request ? "patterns:\n  - name: x_tanh_x\n    action: fuse\n    match:\n"
                                          "      - {op: Add, inputs: [x, c], output: a}\n"
                                          "      - {op: Tanh, inputs: [a], output: s}\n"
                                          "      - {op: Mul, inputs: [a, s], output: y}\n"
                                        : "version: 1\n");
    test::RunResult r = test::run_tool(dir.path(), CUVIL_CUVILC,
                                       {"compile", model, "--config", cfg, "-o", dir.file("m.cuvir"), "--report", report});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string json = test::read_bytes(report);
    const size_t at = json.find("\"tile_kernels\": ");
    return at == std::string::npos ? -1 : std::atoi(json.c_str() + at + 16);
  };
  EXPECT_EQ(kernels(false), 2);
  EXPECT_EQ(kernels(true), 1);
}

}  // namespace
}  // namespace cuvil
