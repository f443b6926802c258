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
  EXPECT_EQ(o.limits.max_nodes, CompileLimits{}.max_nodes);
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
            "c.yaml:2:1: unknown key 'fusoin' (known: version, dims, fusion, limits)");
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
  EXPECT_EQ(config_error("limits: 5\n"), "c.yaml:1:9: limits must be a mapping (key: value), got a scalar");
  EXPECT_EQ(config_error("- a\n- b\n"), "c.yaml:1:1: the config must be a mapping (key: value), got a list");
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

// Every example in configs/ parses: they are documentation and must stay true.
TEST(Config, ShippedExamplesParse) {
  for (const char* name : {"example.yaml"}) {
    const std::string path = std::string(CUVIL_SOURCE_DIR) + "/configs/" + name;
    EXPECT_NO_THROW(load_config_file(path)) << path;
  }
}

// cuvilc: --config is read, a bad config exits 2 naming the line, and --dim overrides the
// config's range for the same symbol.
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

  std::ofstream(cfg) << "dims:\n  batch: x\n";
  r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--config", cfg, "-o", dir.path() + "/m.cuvir"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(cfg + ":2:10: dims.batch: expected N, lo:hi or lo:"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cuvil
