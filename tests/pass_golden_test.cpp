// Per-pass golden tests (STYLE.md: one golden file per pass): every `*.ir` file under
// testdata/passes/<pass name>/ is parsed, that one pass runs on it, the IR verifier checks the
// result, and the printed IR must equal the `*.ir.expected` file next to it.
// CUVIL_UPDATE_GOLDEN=1 rewrites the expectations (then review the diff). Inputs are the IR
// just before the pass, made with `cuvilc compile M.onnx --stop-after PREVIOUS_PASS`.
#include <gtest/gtest.h>
#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"
#include "support/error.h"

namespace cuvil {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ir_files(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 3 && n.compare(n.size() - 3, 3, ".ir") == 0) names.push_back(n);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(PassGolden, EveryPassHasGoldenCases) {
  const char* update = std::getenv("CUVIL_UPDATE_GOLDEN");
  const bool rewrite = update && std::string(update) == "1";
  for (const PassInfo& pass : all_passes()) {
    const std::string dir = std::string(CUVIL_SOURCE_DIR) + "/testdata/passes/" + pass.name;
    const std::vector<std::string> cases = ir_files(dir);
    EXPECT_FALSE(cases.empty()) << "pass " << pass.name << " has no golden case in " << dir;
    for (const std::string& name : cases) {
      SCOPED_TRACE(pass.name + std::string("/") + name);
      std::string error;
      std::optional<Model> m = parse_model(read_text(dir + "/" + name), &error);
      ASSERT_TRUE(m.has_value()) << error;
      verify_model(*m);
      // A case named nhwc_*, nchw_* or auto_* runs with that --layout (passes/choose_layout.h;
      // the default is auto).
      PassContext context;
      if (name.rfind("nhwc_", 0) == 0) context.layout = LayoutChoice::kNhwc;
      if (name.rfind("nchw_", 0) == 0) context.layout = LayoutChoice::kNchw;
      if (name.rfind("auto_", 0) == 0) context.layout = LayoutChoice::kAuto;
      const std::string note = pass.run(*m, context);
      verify_model(*m);
      // An analysis pass (kv-cache) changes no IR: its note is its result, compared with
      // <case>.note.expected where that file exists.
      const std::string note_path = dir + "/" + name + ".note.expected";
      if (std::ifstream(note_path).good()) {
        if (rewrite) std::ofstream(note_path) << note << "\n";
        else EXPECT_EQ(read_text(note_path), note + "\n") << "differs from " << note_path;
      }
      const std::string got = model_to_string(*m);
      const std::string expected_path = dir + "/" + name + ".expected";
      if (rewrite) {
        std::ofstream(expected_path) << got;
        continue;
      }
      EXPECT_EQ(read_text(expected_path), got) << "differs from " << expected_path
                                               << " (CUVIL_UPDATE_GOLDEN=1 rewrites it)";
    }
  }
}

// The pipeline runs the table's passes in order, stops where asked and counts nodes.
TEST(PassGolden, PipelineStopsAfterAPass) {
  std::string error;
  std::optional<Model> m = parse_model(
      "model {\n  ir_version = 8\n  opset \"\" = 17\n}\n"
      "graph g(%x: f32[4]) -> (%y) {\n  %y: ?[*] = Relu<14>(%x)\n}\n",
      &error);
  ASSERT_TRUE(m.has_value()) << error;
  PipelineOptions po;
  po.stop_after = all_passes().front().name;
  std::vector<PassRecord> records = run_passes(*m, po);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].nodes_before, 1);
  EXPECT_EQ(records[0].nodes_after, 1);
  po.stop_after = kStopAfterImport;
  EXPECT_TRUE(run_passes(*m, po).empty());
  po.stop_after = "no-such-pass";
  try {
    run_passes(*m, po);
    ADD_FAILURE() << "unknown pass accepted";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(d.what()).find("--stop-after 'no-such-pass': no such pass (import or a pass, in order: "),
              std::string::npos)
        << d.what();
  }
  EXPECT_EQ(run_passes(*m).size(), all_passes().size());
}

// --skip-pass leaves passes out (and still stops where asked); infer-shapes is required.
TEST(PassGolden, PipelineSkipsPasses) {
  std::string error;
  std::optional<Model> m = parse_model(
      "model {\n  ir_version = 8\n  opset \"\" = 17\n}\n"
      "graph g(%x: f32[4]) -> (%y) {\n  %y: ?[*] = Relu<14>(%x)\n}\n",
      &error);
  ASSERT_TRUE(m.has_value()) << error;
  PipelineOptions po;
  po.skip = {"canonicalize", "cse"};
  std::vector<PassRecord> records = run_passes(*m, po);
  EXPECT_EQ(records.size(), all_passes().size() - 2);
  for (const PassRecord& r : records) EXPECT_TRUE(r.name != "canonicalize" && r.name != "cse") << r.name;
  po.stop_after = "canonicalize";  // skipped: stops there without running it
  records = run_passes(*m, po);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back().name, "shape-arithmetic");
  for (const char* bad : {"infer-shapes", "frobnicate"}) {
    po.skip = {bad};
    try {
      run_passes(*m, po);
      ADD_FAILURE() << bad << " skipped";
    } catch (const Diagnostic& d) {
      EXPECT_EQ(d.code(), ExitCode::kUsage);
      const std::string want = std::string(bad) == "infer-shapes"
                                   ? "--skip-pass infer-shapes: code generation needs every shape"
                                   : "--skip-pass 'frobnicate': no such pass (in order: ";
      EXPECT_NE(std::string(d.what()).find(want), std::string::npos) << d.what();
    }
  }
}

}  // namespace
}  // namespace cuvil
