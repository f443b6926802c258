// cuvilc on bad inputs, end to end: the documented exit code (docs/cli.md), a stderr message
// naming the culprit, an existing output left byte-identical after a failed compile with no
// temporary files left behind, and -o into a missing or read-only directory. Runs the real
// binary (CUVIL_CUVILC) through the shell, with a timeout so that a hang fails the test.
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx_builder.h"
#include "private_tmpfs.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::TempDir;
using Tp = onnx::TensorProto;

using test::RunResult;

// Runs `cuvilc <args>`; `prefix` goes before the binary (e.g. a setpriv invocation).
RunResult run_cuvilc(const std::string& dir, const std::vector<std::string>& args,
                     const std::string& prefix = "") {
  return test::run_tool(dir, CUVIL_CUVILC, args, prefix);
}

using test::list_dir;

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" << (text)

class BadInputCli : public ::testing::Test {
 protected:
  std::string write(const onnx::ModelProto& m, const std::string& name = "model.onnx") {
    return test::write_model(tmp_.path(), m, name);
  }
  TempDir tmp_;
};

TEST_F(BadInputCli, ExternalDataOutsideTheModelDirectory) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  Tp t = test::make_raw_tensor("secret_weights", Tp::FLOAT, {4}, "");
  test::set_external(t, "../../etc/passwd");
  *g->add_initializer() = t;
  test::add_node(g, "Add", {"x", "secret_weights"}, {"y"}, "add");
  test::add_output(g, "y");
  RunResult r = run_cuvilc(tmp_.path(), {"compile", write(m), "--emit", "ir"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_MENTIONS(r.err, "secret_weights");
  EXPECT_MENTIONS(r.err, "../../etc/passwd");
  EXPECT_EQ(r.out, "");
}

TEST_F(BadInputCli, TruncatedModel) {
  std::string bytes;
  ASSERT_TRUE(test::make_relu_model().SerializeToString(&bytes));
  const std::string path = tmp_.file("truncated.onnx");
  test::write_bytes(path, bytes.substr(0, bytes.size() / 2));
  for (const char* cmd : {"inspect", "compile"}) {
    std::vector<std::string> args = {cmd, path};
    if (std::string(cmd) == "compile") args.insert(args.end(), {"--emit", "ir"});
    RunResult r = run_cuvilc(tmp_.path(), args);
    EXPECT_EQ(r.exit_code, 3) << cmd << ": " << r.err;
    EXPECT_MENTIONS(r.err, path);
    EXPECT_MENTIONS(r.err, "cuvilc: error:");
  }
}

TEST_F(BadInputCli, EmptyAndMissingFiles) {
  const std::string empty = tmp_.file("empty.onnx");
  test::write_bytes(empty, "");
  RunResult r = run_cuvilc(tmp_.path(), {"inspect", empty});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_MENTIONS(r.err, empty);
  const std::string missing = tmp_.file("missing.onnx");
  RunResult r2 = run_cuvilc(tmp_.path(), {"compile", missing, "--emit", "ir"});
  EXPECT_EQ(r2.exit_code, 5) << r2.err;
  EXPECT_MENTIONS(r2.err, missing);
}

TEST_F(BadInputCli, GraphErrorNamesTheNode) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Add", {"x", "never_defined"}, {"y"}, "the_bad_add");
  test::add_output(g, "y");
  RunResult r = run_cuvilc(tmp_.path(), {"compile", write(m), "--emit", "ir"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_MENTIONS(r.err, "the_bad_add");
  EXPECT_MENTIONS(r.err, "never_defined");
}

TEST_F(BadInputCli, TooNewIrVersionAndOpset) {
  onnx::ModelProto m = test::make_relu_model();
  m.set_ir_version(99);
  RunResult r = run_cuvilc(tmp_.path(), {"inspect", write(m)});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_MENTIONS(r.err, "ir_version 99");
  RunResult r2 = run_cuvilc(tmp_.path(), {"inspect", write(test::make_relu_model(40))});
  EXPECT_EQ(r2.exit_code, 4) << r2.err;
  EXPECT_MENTIONS(r2.err, "opset 40");
}

// Unknown ops in several domains, in the main graph and a subgraph, feeding known ops.
onnx::ModelProto unknown_ops_model() {
  onnx::ModelProto m = test::make_model();
  test::add_opset(m, "com.example", 1);
  test::add_opset(m, "org.other", 2);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_input(g, "cond", Tp::BOOL, {});
  test::add_node(g, "Frobnicate", {"x"}, {"a"}, "frob_first", "com.example");
  test::add_node(g, "Relu", {"a"}, {"b"}, "relu_after_frob");
  test::add_node(g, "Frobnicate", {"b"}, {"c"}, "frob_second", "com.example");
  test::add_node(g, "MadeUpOp", {"c"}, {"d"}, "made_up", "");
  auto* iff = test::add_node(g, "If", {"cond"}, {"e"}, "if_node");
  auto* t = test::set_attr_graph(iff, "then_branch");
  t->set_name("then");
  test::add_node(t, "Gizmo", {"d"}, {"t_out"}, "gizmo_in_branch", "org.other");
  test::add_output(t, "t_out");
  auto* el = test::set_attr_graph(iff, "else_branch");
  el->set_name("else");
  test::add_node(el, "Identity", {"d"}, {"e_out"}, "else_id");
  test::add_output(el, "e_out");
  test::add_node(g, "Neg", {"e"}, {"y"}, "neg");
  test::add_output(g, "y");
  return m;
}

TEST_F(BadInputCli, CompileListsAllUnsupportedOpsAtOnce) {
  const std::string model = write(unknown_ops_model());
  const std::string out = tmp_.file("out.ir");
  RunResult r = run_cuvilc(tmp_.path(), {"compile", model, "--emit", "ir", "-o", out});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  for (const char* needle : {"4 node(s)", "com.example::Frobnicate", "'frob_first'",
                             "'frob_second'", "MadeUpOp", "'made_up'", "org.other::Gizmo",
                             "'gizmo_in_branch'"})
    EXPECT_MENTIONS(r.err, needle);
  EXPECT_EQ(access(out.c_str(), F_OK), -1) << "a failed compile wrote " << out;
}

TEST_F(BadInputCli, InspectListsUnsupportedOpsAndSucceeds) {
  RunResult r = run_cuvilc(tmp_.path(), {"inspect", write(unknown_ops_model())});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_MENTIONS(r.out, "unsupported ops: 4");
  for (const char* needle : {"com.example::Frobnicate (node 'frob_first' in graph 'main')",
                             "com.example::Frobnicate (node 'frob_second' in graph 'main')",
                             "MadeUpOp (node 'made_up' in graph 'main')",
                             "org.other::Gizmo (node 'gizmo_in_branch' in graph 'then')"})
    EXPECT_MENTIONS(r.out, needle);
}

TEST_F(BadInputCli, FailedCompileLeavesTheOutputUntouched) {
  // Model and output in separate directories so the output directory can be listed exactly.
  TempDir out_dir;
  const std::string out = out_dir.file("out.ir");
  const std::string previous = "previous output\n\x01\x02 bytes that must survive\n";
  test::write_bytes(out, previous);
  struct stat before;
  ASSERT_EQ(stat(out.c_str(), &before), 0);

  std::string bad_bytes;
  ASSERT_TRUE(test::make_relu_model().SerializeToString(&bad_bytes));
  const std::string truncated = tmp_.file("truncated.onnx");
  test::write_bytes(truncated, bad_bytes.substr(0, bad_bytes.size() - 3));
  onnx::ModelProto bad_graph = test::make_relu_model();
  test::add_output(bad_graph.mutable_graph(), "phantom");
  for (const std::string& model :
       {truncated, write(bad_graph, "bad_graph.onnx"), write(unknown_ops_model(), "unk.onnx"),
        tmp_.file("missing.onnx")}) {
    RunResult r = run_cuvilc(tmp_.path(), {"compile", model, "--emit", "ir", "-o", out});
    EXPECT_NE(r.exit_code, 0) << model;
    EXPECT_EQ(test::read_bytes(out), previous) << model;
    EXPECT_EQ(list_dir(out_dir.path()), std::set<std::string>{"out.ir"}) << model;
    struct stat after;
    ASSERT_EQ(stat(out.c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino) << "the output was replaced: " << model;
  }
}

TEST_F(BadInputCli, SuccessfulCompileReplacesTheOutputAtomically) {
  TempDir out_dir;
  const std::string out = out_dir.file("out.ir");
  test::write_bytes(out, "old");
  RunResult r = run_cuvilc(tmp_.path(), {"compile", write(test::make_relu_model()), "--emit",
                                         "ir", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string text = test::read_bytes(out);
  EXPECT_MENTIONS(text, "Relu");
  EXPECT_EQ(list_dir(out_dir.path()), std::set<std::string>{"out.ir"});
}

TEST_F(BadInputCli, OutputIntoAMissingDirectory) {
  const std::string out = tmp_.file("no/such/dir/out.ir");
  RunResult r = run_cuvilc(tmp_.path(), {"compile", write(test::make_relu_model()), "--emit",
                                         "ir", "-o", out});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_MENTIONS(r.err, out);
}

TEST_F(BadInputCli, OutputIntoAReadOnlyDirectory) {
  // Root ignores directory permissions: run cuvilc as nobody when we are root.
  std::string prefix;
  if (geteuid() == 0) {
    if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "root without setpriv";
    prefix = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    ASSERT_EQ(chmod(tmp_.path().c_str(), 0755), 0);  // nobody must reach the model
  }
  const std::string model = write(test::make_relu_model());
  ASSERT_EQ(chmod(model.c_str(), 0644), 0);
  const std::string ro = tmp_.file("readonly");
  ASSERT_EQ(mkdir(ro.c_str(), 0755), 0);
  const std::string out = ro + "/out.ir";
  test::write_bytes(out, "keep me");
  ASSERT_EQ(chmod(ro.c_str(), 0555), 0);
  RunResult r = run_cuvilc(tmp_.path(), {"compile", model, "--emit", "ir", "-o", out}, prefix);
  if (r.exit_code == 126 || r.exit_code == 127)
    GTEST_SKIP() << "cannot run cuvilc as another user here: " << r.err;
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_MENTIONS(r.err, out);
  EXPECT_EQ(test::read_bytes(out), "keep me");
  EXPECT_EQ(list_dir(ro), std::set<std::string>{"out.ir"});
}

TEST_F(BadInputCli, BadDimOptionIsAUsageError) {
  const std::string model = write(test::make_relu_model());
  RunResult r = run_cuvilc(tmp_.path(), {"inspect", model, "--dim", "batch=9:3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "batch=9:3");
  RunResult r2 = run_cuvilc(tmp_.path(), {"inspect", model, "--dim", "nosuch=3"});
  EXPECT_EQ(r2.exit_code, 2) << r2.err;
  EXPECT_MENTIONS(r2.err, "nosuch");
}

// --buckets: syntax, unknown symbols, bounds outside the range, pow2 without a maximum.
TEST_F(BadInputCli, BadBucketsOptionIsAUsageError) {
  onnx::ModelProto m = test::make_model();
  test::add_input(m.mutable_graph(), "x", Tp::FLOAT, {"N", 3});
  test::add_node(m.mutable_graph(), "Relu", {"x"}, {"y"}, "relu");
  test::add_output(m.mutable_graph(), "y", Tp::FLOAT, {"N", 3});
  const std::string model = write(m);
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--buckets", "N"}, "--buckets: expected auto, name=pow2 or name=b1,b2,... (inclusive upper bounds), got 'N'"},
      {{"--buckets", "N=4,2"}, "--buckets: bucket bounds of 'N' must increase: 2 after 4 (in 'N=4,2')"},
      {{"--buckets", "nosuch=2"}, "--buckets: 'nosuch' is not a symbol of the model's inputs (symbols: N)"},
      {{"--dim", "N=1:8", "--buckets", "N=2,20"}, "--buckets: bound 20 of 'N' is outside its range [1, 8]"},
      {{"--buckets", "N=pow2"}, "--buckets N=pow2 needs an upper bound for 'N' (its range is [0, inf))"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"compile", model, "-o", tmp_.file("m.cuvir")};
    args.insert(args.end(), c.args.begin(), c.args.end());
    RunResult r = run_cuvilc(tmp_.path(), args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_MENTIONS(r.err, c.message);
  }
}

// ---- an output path naming a file the compile reads: exit 2, nothing touched ----

// The model's directory as it is, before and after a refused compile: names and contents.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const std::string& n : list_dir(dir)) {
    struct stat st;
    if (lstat((dir + "/" + n).c_str(), &st) == 0 && S_ISREG(st.st_mode))
      files[n] = test::read_bytes(dir + "/" + n);
    else
      files[n] = "(not a regular file)";
  }
  return files;
}

// Every way of writing (a package, --emit ir, --emit bytecode) to `out` is refused with exit 2
// and a message naming `out` and `input_description`; nothing in `dir` changes.
void expect_output_refused(const std::string& dir, const std::string& model, const std::string& out,
                           const std::string& input_description) {
  const auto before = snapshot(dir);
  for (std::vector<std::string> emit : {std::vector<std::string>{}, {"--emit", "ir"}, {"--emit", "bytecode"}}) {
    std::vector<std::string> args = {"compile", model, "-o", out};
    args.insert(args.end(), emit.begin(), emit.end());
    RunResult r = run_cuvilc(dir, args);
    const std::string what = emit.empty() ? "package" : emit[1];
    EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
    EXPECT_MENTIONS(r.err, "output '" + out + "' names the same file as " + input_description);
    EXPECT_MENTIONS(r.err, "nothing was written");
    EXPECT_EQ(snapshot(dir), before) << what;
  }
}

class BadInputCliSameFile : public BadInputCli {
 protected:
  void SetUp() override {
    model_ = write(test::make_relu_model());
    // The model really compiles: only the output path is wrong below.
    RunResult ok = run_cuvilc(tmp_.path(), {"compile", model_, "-o", tmp_.file("ok.cuvir")});
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    ASSERT_EQ(unlink(tmp_.file("ok.cuvir").c_str()), 0);
  }
  std::string model_;
};

TEST_F(BadInputCliSameFile, OutputIsTheModel) {
  expect_output_refused(tmp_.path(), model_, model_, "the input model '" + model_ + "'");
}

TEST_F(BadInputCliSameFile, OutputIsTheModelSpelledDifferently) {
  // Relative to the current directory, with "./" and through "sub/..".
  ASSERT_EQ(mkdir(tmp_.file("sub").c_str(), 0755), 0);
  test::ScopedChdir in_model_dir(tmp_.path());
  ASSERT_TRUE(in_model_dir.ok());
  expect_output_refused(".", "model.onnx", "./model.onnx", "the input model 'model.onnx'");
  expect_output_refused(".", "./model.onnx", "sub/../model.onnx", "the input model './model.onnx'");
  expect_output_refused(".", "model.onnx", tmp_.file("model.onnx"), "the input model 'model.onnx'");
}

TEST_F(BadInputCliSameFile, OutputIsASymlinkToTheModel) {
  const std::string link = tmp_.file("link.cuvir");
  ASSERT_EQ(symlink("model.onnx", link.c_str()), 0);
  expect_output_refused(tmp_.path(), model_, link, "the input model '" + model_ + "'");
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the symlink was replaced";
}

TEST_F(BadInputCliSameFile, OutputThroughASymlinkedDirectory) {
  TempDir other;
  const std::string linked_dir = other.file("models");
  ASSERT_EQ(symlink(tmp_.path().c_str(), linked_dir.c_str()), 0);
  expect_output_refused(tmp_.path(), model_, linked_dir + "/model.onnx",
                        "the input model '" + model_ + "'");
}

TEST_F(BadInputCliSameFile, OutputIsAHardLinkToTheModel) {
  const std::string hard = tmp_.file("hard.cuvir");
  ASSERT_EQ(link(model_.c_str(), hard.c_str()), 0);
  expect_output_refused(tmp_.path(), model_, hard, "the input model '" + model_ + "'");
}

TEST_F(BadInputCli, OutputIsAnExternalDataFile) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {4});
  const std::vector<float> w = {1.f, 2.f, 3.f, 4.f};
  Tp t = test::make_raw_tensor("weights", Tp::FLOAT, {4}, "");
  test::set_external(t, "weights.bin");
  *g->add_initializer() = t;
  test::add_node(g, "Add", {"x", "weights"}, {"y"}, "add");
  test::add_output(g, "y", Tp::FLOAT, {4});
  const std::string model = write(m);
  test::write_bytes(tmp_.file("weights.bin"), test::raw_of(w));
  RunResult ok = run_cuvilc(tmp_.path(), {"compile", model, "-o", tmp_.file("ok.cuvir")});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  ASSERT_EQ(unlink(tmp_.file("ok.cuvir").c_str()), 0);
  const std::string data = "the external data file 'weights.bin' of tensor 'weights'";
  expect_output_refused(tmp_.path(), model, tmp_.file("weights.bin"), data);
  const std::string link = tmp_.file("w.cuvir");
  ASSERT_EQ(symlink("weights.bin", link.c_str()), 0);
  expect_output_refused(tmp_.path(), model, link, data);
  // (A hard link to an external data file is refused as input already: exit 3.)
}

TEST_F(BadInputCli, DiskFullLeavesTheOldPackage) {
  // A weight of 128 KiB makes a package that cannot fit a 64 KiB tmpfs.
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {32768});
  *g->add_initializer() = test::make_float_tensor("w", {32768}, std::vector<float>(32768, 0.5f));
  test::add_node(g, "Add", {"x", "w"}, {"y"}, "add");
  test::add_output(g, "y", Tp::FLOAT, {32768});
  const std::string model = write(m);
  const std::string small = tmp_.file("small");
  ASSERT_EQ(mkdir(small.c_str(), 0755), 0);
  const std::string out = small + "/model.cuvir";
  const std::string old = "the old package";
  int rc = test::run_with_private_tmpfs(small, "64k", [&]() -> int {
    test::write_bytes(out, old);
    RunResult r = run_cuvilc(tmp_.path(), {"compile", model, "-o", out});
    int bad = 0;
    if (r.exit_code != 5) bad = 1, std::fprintf(stderr, "exit %d, expected 5: %s\n", r.exit_code, r.err.c_str());
    if (r.err.find(out) == std::string::npos || r.err.find("No space left on device") == std::string::npos)
      bad = 2, std::fprintf(stderr, "the message does not name the path and ENOSPC: %s\n", r.err.c_str());
    if (test::read_bytes(out) != old) bad = 3, std::fprintf(stderr, "the old package changed\n");
    if (list_dir(small) != std::set<std::string>{"model.cuvir"})
      bad = 4, std::fprintf(stderr, "a temporary was left on the full disk\n");
    return bad;
  });
  if (rc == test::kPrivateMountRefused)
    GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here (needs CAP_SYS_ADMIN or unprivileged user namespaces)";
  EXPECT_EQ(rc, 0) << "see the child's message above";
}

}  // namespace
}  // namespace cuvil
