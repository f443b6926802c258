// cuvil-run end to end (suite CliRun): a tiny model is compiled with the real cuvilc
// (CUVIL_CUVILC) and run with the real cuvil-run (CUVIL_RUN) through the shell, with a
// timeout so that a hang fails the test. Covers inputs from .npy and ONNX TensorProto .pb
// files, random inputs from --shape, --output-dir (.npy files that read back), --bench, and
// the documented exit codes with a message naming the culprit: 2 for a missing, unknown or
// duplicate input, 3 for a corrupt package (naming the section), 5 for a missing file.
// The .npy files are written and read with a small independent codec (not cli/npy.cpp), so
// the test also checks that cuvil-run speaks the format NumPy does.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "onnx_builder.h"
#include "npy_test_util.h"
#include "run_tool.h"
#include "runtime/package.h"
#include "runtime/session.h"

namespace cuvil {
namespace {

using test::TempDir;
using Tp = onnx::TensorProto;

using test::RunResult;
using test::run_tool;
using test::npy_file;
using test::raw;
using test::values;

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" << (text)

// ---- .npy reading (writing: npy_test_util.h) ----

struct Npy {
  std::string header;
  std::string data;
};
// Splits a .npy file into its header text and data; fails the test on a malformed file.
Npy read_npy_file(const std::string& path) {
  std::string f = test::read_bytes(path);
  Npy n;
  EXPECT_GE(f.size(), 10u);
  if (f.size() < 10) return n;
  EXPECT_EQ(f.substr(0, 6), "\x93NUMPY");
  size_t len = static_cast<uint8_t>(f[8]) | (static_cast<size_t>(static_cast<uint8_t>(f[9])) << 8);
  EXPECT_LE(10 + len, f.size());
  EXPECT_EQ((10 + len) % 64, 0u) << "data not 64-byte aligned";
  n.header = f.substr(10, len);
  n.data = f.substr(std::min(f.size(), 10 + len));
  return n;
}


const std::vector<float> kBias = {0.5f, -1.f, 2.f};

// x: f32[batch, 3] -> Add(bias) -> Relu -> y
onnx::ModelProto tiny_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3});
  *g->add_initializer() = test::make_float_tensor("bias", {3}, kBias);
  test::add_node(g, "Add", {"x", "bias"}, {"s"}, "add");
  test::add_node(g, "Relu", {"s"}, {"y"}, "relu");
  test::add_output(g, "y", Tp::FLOAT, {"batch", 3});
  return m;
}

// a: f32[2, 2] (static), b: f32[2, 2] -> Mul -> c
onnx::ModelProto static_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, {2, 2});
  test::add_input(g, "b", Tp::FLOAT, {2, 2});
  test::add_node(g, "Mul", {"a", "b"}, {"c"}, "mul");
  test::add_output(g, "c", Tp::FLOAT, {2, 2});
  return m;
}

std::vector<float> expected_y(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float s = x[i] + kBias[i % 3];
    y[i] = s > 0.f ? s : 0.f;
  }
  return y;
}

class CliRun : public ::testing::Test {
 protected:
  void SetUp() override {
    package_ = tmp_.file("tiny.cuvir");
    RunResult r = run_tool(tmp_.path(), CUVIL_CUVILC,
                             {"compile", test::write_model(tmp_.path(), tiny_model(), "tiny.onnx"), "-o", package_,
                              "--dim", "batch=1:8"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), package_);
    return run_tool(tmp_.path(), CUVIL_RUN, args);
  }
  TempDir tmp_;
  std::string package_;
};

const std::vector<float> kX = {-1.f, 0.5f, -3.f, 4.f, 0.25f, -0.5f};  // [2, 3]

TEST_F(CliRun, InputFromNpy) {
  test::write_bytes(tmp_.file("x.npy"), npy_file("<f4", {2, 3}, raw(kX)));
  const std::string out_dir = tmp_.file("out");
  RunResult r = run({"--input", "x=" + tmp_.file("x.npy"), "--output-dir", out_dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_MENTIONS(r.out, "y: f32[2, 3]");
  Npy y = read_npy_file(out_dir + "/y.npy");
  EXPECT_MENTIONS(y.header, "'descr': '<f4'");
  EXPECT_MENTIONS(y.header, "'fortran_order': False");
  EXPECT_MENTIONS(y.header, "'shape': (2,3)");
  EXPECT_EQ(values<float>(y.data), expected_y(kX));
}

TEST_F(CliRun, InputFromTensorProto) {
  for (bool use_raw : {true, false}) {
    Tp t = use_raw ? test::make_raw_tensor("x", Tp::FLOAT, {2, 3}, test::raw_of(kX))
                   : test::make_float_tensor("x", {2, 3}, kX);
    std::string bytes;
    ASSERT_TRUE(t.SerializeToString(&bytes));
    test::write_bytes(tmp_.file("x.pb"), bytes);
    const std::string out_dir = tmp_.file(use_raw ? "out_raw" : "out_typed");
    RunResult r = run({"--input", "x=" + tmp_.file("x.pb"), "--output-dir", out_dir});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(values<float>(read_npy_file(out_dir + "/y.npy").data), expected_y(kX));
  }
}

TEST_F(CliRun, RandomInputFromShape) {
  const std::string out_dir = tmp_.file("out");
  RunResult r = run({"--shape", "x=4x3", "--output-dir", out_dir, "--seed", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_MENTIONS(r.out, "y: f32[4, 3]");
  Npy y = read_npy_file(out_dir + "/y.npy");
  EXPECT_MENTIONS(y.header, "'shape': (4,3)");
  std::vector<float> v = values<float>(y.data);
  ASSERT_EQ(v.size(), 12u);
  for (float f : v) EXPECT_TRUE(f >= 0.f && f < 3.f) << f;  // relu(x + bias) with x in [-1, 1)
  // Same seed, same output.
  RunResult again = run({"--shape", "x=4x3", "--output-dir", tmp_.file("out2"), "--seed", "5"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(read_npy_file(tmp_.file("out2") + "/y.npy").data, y.data);
}

TEST_F(CliRun, StaticInputsNeedNoOption) {
  std::string pkg = tmp_.file("static.cuvir");
  RunResult c = run_tool(tmp_.path(), CUVIL_CUVILC,
                           {"compile", test::write_model(tmp_.path(), static_model(), "static.onnx"), "-o", pkg});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult r = run_tool(tmp_.path(), CUVIL_RUN, {pkg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_MENTIONS(r.out, "c: f32[2, 2]");
}

// A real exporter's control flow: torch 1.13 scripted loop with an If and a list that is
// appended to and stacked (testdata/scripts/export_loop_append.py), against ONNX Runtime.
TEST(CliRunModels, TorchScriptedLoopMatchesOnnxRuntime) {
  TempDir tmp;
  const std::string dir = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/";
  const std::string pkg = tmp.file("loop_append.cuvir");
  RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", dir + "loop_append.onnx", "-o", pkg});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const std::string out_dir = tmp.file("out");
  RunResult r = run_tool(tmp.path(), CUVIL_RUN,
                           {pkg, "--input", "x=" + dir + "loop_append_x.npy", "--output-dir", out_dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"h", "hs"}) {
    const Npy want = read_npy_file(dir + "loop_append_" + name + ".npy");
    const Npy got = read_npy_file(out_dir + "/" + name + ".npy");
    auto shape_of = [](const std::string& header) {  // "'shape': (6, 5)" without spaces
      std::string s = header.substr(header.find("'shape'"));
      s = s.substr(0, s.find(')') + 1);
      s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
      return s;
    };
    EXPECT_EQ(shape_of(got.header), shape_of(want.header)) << name;
    const std::vector<float> w = values<float>(want.data), g = values<float>(got.data);
    ASSERT_EQ(g.size(), w.size()) << name;
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5f + 1e-4f * std::fabs(w[i])) << name << "[" << i << "]";
  }
}

TEST_F(CliRun, Bench) {
  RunResult r = run({"--shape", "x=2x3", "--bench", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"bench: 3 runs", "p50", "p90", "p99", "runs/s"}) EXPECT_MENTIONS(r.out, word);
  // The per-run overhead, from the runtime's statistics (docs/cli.md).
  for (const char* word : {"overhead (median per run): set inputs", "bind shapes", "dispatch", "kernel calls",
                           "ns per call", "in kernels", "run "})
    EXPECT_MENTIONS(r.out, word);
}

// A package with two programs (format 3): the compiled one twice, the first guarded to
// batch in [1, 2]. cuvilc inspect lists both with their guards; cuvil-run runs either,
// with the same results.
TEST_F(CliRun, TwoProgramPackage) {
  std::shared_ptr<rt::LoadedPackage> pkg;
  rt::Status st = rt::LoadedPackage::open_file(package_, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  rt::PackageContents c;
  c.manifest = pkg->manifest().text;
  c.weights.assign(pkg->weights(), pkg->weights() + pkg->weights_size());
  c.report = pkg->report();
  ASSERT_EQ(pkg->program().symbols.size(), 1u);
  c.programs.push_back({pkg->program(), {{{0, 1, 2}}}});
  c.programs.push_back({pkg->program(), {}});
  const std::vector<uint8_t> bytes = rt::write_package(c);
  const std::string two = tmp_.file("two.cuvir");
  test::write_bytes(two, std::string(bytes.begin(), bytes.end()));
  RunResult i = run_tool(tmp_.path(), CUVIL_CUVILC, {"inspect", two, "--disasm"});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_MENTIONS(i.out, "programs: 2 (the first whose guard holds runs)");
  EXPECT_MENTIONS(i.out, "program 0: guard batch in [1, 2]; arena");
  EXPECT_MENTIONS(i.out, "program 1: guard always;");
  EXPECT_MENTIONS(i.out, "# program 1");
  for (int64_t batch : {2, 5}) {
    std::vector<float> x(static_cast<size_t>(batch) * 3);
    for (size_t k = 0; k < x.size(); ++k) x[k] = kX[k % kX.size()] * static_cast<float>(k + 1);
    test::write_bytes(tmp_.file("x.npy"), npy_file("<f4", {batch, 3}, raw(x)));
    const std::string out_dir = tmp_.file("out" + std::to_string(batch));
    RunResult r = run_tool(tmp_.path(), CUVIL_RUN, {two, "--input", "x=" + tmp_.file("x.npy"), "--output-dir", out_dir});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(values<float>(read_npy_file(out_dir + "/y.npy").data), expected_y(x)) << "batch " << batch;
  }
}

// --buckets: one program per bucket, each lowered with its bucket's range; inspect lists
// them with their guards, the session runs the one whose guard holds, and every bucket
// computes what the one-program package computes.
TEST_F(CliRun, BucketPrograms) {
  const std::string pkg_path = tmp_.file("buckets.cuvir");
  RunResult c = run_tool(tmp_.path(), CUVIL_CUVILC,
                         {"compile", tmp_.file("tiny.onnx"), "-o", pkg_path, "--dim", "batch=1:8", "--buckets",
                          "batch=1,4"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_MENTIONS(c.err, "3 bucket programs");
  RunResult i = run_tool(tmp_.path(), CUVIL_CUVILC, {"inspect", pkg_path});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_MENTIONS(i.out, "programs: 3");
  EXPECT_MENTIONS(i.out, "program 0: guard batch in [1, 1];");
  EXPECT_MENTIONS(i.out, "program 1: guard batch in [2, 4];");
  EXPECT_MENTIONS(i.out, "program 2: guard always;");
  EXPECT_MENTIONS(i.out, "bucket 2: batch in [5, 8];");
  EXPECT_MENTIONS(i.out, "symbol: batch 1:8");  // the declared range, not a bucket's
  std::shared_ptr<rt::LoadedPackage> pkg;
  rt::Status st = rt::LoadedPackage::open_file(pkg_path, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  std::unique_ptr<rt::Session> session;
  ASSERT_TRUE(rt::Session::create(pkg, rt::SessionOptions{1, 0}, &session).is_ok());
  for (int64_t batch : {1, 3, 4, 5, 8, 2}) {
    std::vector<float> x(static_cast<size_t>(batch) * 3);
    for (size_t k = 0; k < x.size(); ++k) x[k] = kX[k % kX.size()] - 0.1f * static_cast<float>(k);
    ASSERT_TRUE(session->set_input(0, DType::Float, {batch, 3}, x.data(), x.size() * 4).is_ok());
    st = session->run();
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(session->program_index(), batch == 1 ? 0u : batch <= 4 ? 1u : 2u) << "batch " << batch;
    const rt::TensorView* y = session->output(0);
    ASSERT_NE(y, nullptr);
    EXPECT_EQ(std::vector<float>(y->as<float>(), y->as<float>() + x.size()), expected_y(x)) << "batch " << batch;
  }
  // cuvil-run --report names the bucket of the last run.
  test::write_bytes(tmp_.file("x3.npy"), npy_file("<f4", {3, 3}, raw(std::vector<float>(9, 1.f))));
  RunResult rr = run_tool(tmp_.path(), CUVIL_RUN,
                          {pkg_path, "--input", "x=" + tmp_.file("x3.npy"), "--report", tmp_.file("run.json")});
  ASSERT_EQ(rr.exit_code, 0) << rr.err;
  EXPECT_MENTIONS(test::read_bytes(tmp_.file("run.json")), "\"bucket\": 1,");
  // Outside the declared range: the usual error, naming the symbol.
  std::vector<float> x(9 * 3, 1.f);
  ASSERT_TRUE(session->set_input(0, DType::Float, {9, 3}, x.data(), x.size() * 4).is_ok());
  st = session->run();
  EXPECT_FALSE(st.is_ok());
  EXPECT_MENTIONS(st.message(), "batch");
}

// cuvilc shows its stages on a terminal (through script(1)'s pseudo-terminal) and clears the
// line before its summary; without a terminal (every other test) it prints no progress.
TEST_F(CliRun, CompileProgressOnlyOnATerminal) {
  if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no script(1) to make a terminal";
  const std::string cmd = test::shell_quote(CUVIL_CUVILC) + " compile " + test::shell_quote(tmp_.file("tiny.onnx")) +
                          " -o " + test::shell_quote(tmp_.file("p.cuvir")) + " --dim batch=1:8 --buckets batch=2";
  RunResult t = run_tool(tmp_.path(), "/usr/bin/script", {"-qec", cmd, "/dev/null"});
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  EXPECT_MENTIONS(t.out, "cuvilc: [1/4] importing");
  EXPECT_MENTIONS(t.out, "[2/4] passes: 1 of");
  EXPECT_MENTIONS(t.out, "[3/4] lowering bucket 2 of 2");
  EXPECT_MENTIONS(t.out, "[4/4] writing and verifying");
  EXPECT_MENTIONS(t.out, "\r\033[Kcuvilc: wrote");  // the status line is cleared first
  RunResult plain = run_tool(tmp_.path(), CUVIL_CUVILC,
                             {"compile", tmp_.file("tiny.onnx"), "-o", tmp_.file("q.cuvir"), "--dim", "batch=1:8"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err.find("[1/4]"), std::string::npos) << plain.err;
  EXPECT_EQ(plain.err.find('\r'), std::string::npos) << plain.err;
}

TEST_F(CliRun, ThreadsAboveTheCapIsAUsageError) {
  RunResult r = run({"--shape", "x=2x3", "--threads", "1000"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "--threads 1000");
  EXPECT_MENTIONS(r.err, "maximum of 256");
  r = run({"--shape", "x=2x3", "--threads", "256"});  // the cap itself runs
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CliRun, MissingInputTellsTheUserWhatToPass) {
  RunResult r = run({});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "'x'");
  EXPECT_MENTIONS(r.err, "[batch, 3]");
  EXPECT_MENTIONS(r.err, "--input x=");
  EXPECT_MENTIONS(r.err, "--shape x=");
}

TEST_F(CliRun, UnknownInputName) {
  test::write_bytes(tmp_.file("x.npy"), npy_file("<f4", {2, 3}, raw(kX)));
  RunResult r = run({"--input", "x=" + tmp_.file("x.npy"), "--input", "z=" + tmp_.file("x.npy")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "unknown input 'z'");
  r = run({"--shape", "x=2x3", "--shape", "q=1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "unknown input 'q'");
}

TEST_F(CliRun, DuplicateInput) {
  test::write_bytes(tmp_.file("x.npy"), npy_file("<f4", {2, 3}, raw(kX)));
  RunResult r = run({"--input", "x=" + tmp_.file("x.npy"), "--input", "x=" + tmp_.file("x.npy")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "'x' given twice");
  r = run({"--shape", "x=2x3", "--shape", "x=1x3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "'x' given twice");
  r = run({"--input", "x=" + tmp_.file("x.npy"), "--shape", "x=1x3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "'x'");
  EXPECT_MENTIONS(r.err, "both");
}

TEST_F(CliRun, BadInputValues) {
  // dtype, rank and range errors come from the runtime, naming the input: exit 2.
  test::write_bytes(tmp_.file("i.npy"), npy_file("<i8", {2, 3}, std::string(48, '\0')));
  RunResult r = run({"--input", "x=" + tmp_.file("i.npy")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "'x'");
  EXPECT_MENTIONS(r.err, "i64");
  r = run({"--shape", "x=9x3"});  // batch is compiled as 1:8
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "batch = 9");
  r = run({"--shape", "x=2x3x1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "rank");
  r = run({"--shape", "x=2xq"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "bad shape");
  // A huge shape: checked against the model before any random data is allocated.
  r = run({"--shape", "x=999999999999x999999999999"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "'x'");
  // A bad .npy file: the message names it.
  test::write_bytes(tmp_.file("bad.npy"), npy_file(">f4", {2, 3}, std::string(24, '\0')));
  r = run({"--input", "x=" + tmp_.file("bad.npy")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, tmp_.file("bad.npy"));
  EXPECT_MENTIONS(r.err, "big-endian");
}

// --output-dir DIR writes DIR/y.npy; when that names a file the run reads (an input, the
// package; also spelled relatively, through a symlink or a hard link) the run is refused with
// exit 2 before anything is written.
TEST_F(CliRun, OutputOverAnInputIsRefused) {
  const std::string input = npy_file("<f4", {2, 3}, raw(kX));
  auto expect_refused = [&](const std::vector<std::string>& args, const std::string& file,
                            const std::string& description) {
    const std::string before = test::read_bytes(file);
    RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_MENTIONS(r.err, "output 'y' would be written to");
    EXPECT_MENTIONS(r.err, "names the same file as " + description);
    EXPECT_MENTIONS(r.err, "nothing was written");
    EXPECT_EQ(r.out, "") << "the run went ahead";
    EXPECT_EQ(test::read_bytes(file), before);
  };
  // Plain: the input is DIR/y.npy.
  const std::string plain = tmp_.file("plain");
  ASSERT_EQ(mkdir(plain.c_str(), 0755), 0);
  test::write_bytes(plain + "/y.npy", input);
  expect_refused({"--input", "x=" + plain + "/y.npy", "--output-dir", plain}, plain + "/y.npy",
                 "--input x ('" + plain + "/y.npy')");
  // Relative, spelled differently: --input x=plain/y.npy --output-dir ./plain/.
  {
    test::ScopedChdir in_tmp(tmp_.path());
    ASSERT_TRUE(in_tmp.ok());
    expect_refused({"--input", "x=plain/y.npy", "--output-dir", "./plain/."}, plain + "/y.npy",
                   "--input x ('plain/y.npy')");
  }
  // DIR/y.npy is a symlink to the input, or a hard link to it.
  test::write_bytes(tmp_.file("x.npy"), input);
  const std::string linked = tmp_.file("linked"), hard = tmp_.file("hard");
  ASSERT_EQ(mkdir(linked.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(hard.c_str(), 0755), 0);
  ASSERT_EQ(symlink("../x.npy", (linked + "/y.npy").c_str()), 0);
  ASSERT_EQ(link(tmp_.file("x.npy").c_str(), (hard + "/y.npy").c_str()), 0);
  for (const std::string& dir : {linked, hard})
    expect_refused({"--input", "x=" + tmp_.file("x.npy"), "--output-dir", dir}, tmp_.file("x.npy"),
                   "--input x ('" + tmp_.file("x.npy") + "')");
  // DIR/y.npy is the package itself (through a symlink).
  const std::string pkg_dir = tmp_.file("pkg");
  ASSERT_EQ(mkdir(pkg_dir.c_str(), 0755), 0);
  ASSERT_EQ(symlink(package_.c_str(), (pkg_dir + "/y.npy").c_str()), 0);
  expect_refused({"--shape", "x=2x3", "--output-dir", pkg_dir}, package_, "the package '" + package_ + "'");
  // An output directory that holds no input is fine.
  RunResult ok = run({"--input", "x=" + tmp_.file("x.npy"), "--output-dir", tmp_.file("fresh")});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(values<float>(read_npy_file(tmp_.file("fresh") + "/y.npy").data), expected_y(kX));
}

TEST_F(CliRun, MissingInputFileIsAnIoError) {
  RunResult r = run({"--input", "x=" + tmp_.file("nope.npy")});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_MENTIONS(r.err, tmp_.file("nope.npy"));
}

TEST_F(CliRun, CorruptPackageNamesTheSection) {
  std::string bytes = test::read_bytes(package_);
  std::shared_ptr<rt::LoadedPackage> pkg;
  rt::Status st = rt::LoadedPackage::open_memory(bytes.data(), bytes.size(), true, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  int flipped = 0;
  for (const rt::SectionEntry& s : pkg->sections()) {
    if (s.size == 0) continue;
    const std::string name = rt::section_kind_name(s.kind);
    std::string bad = bytes;
    bad[s.offset + s.size / 2] ^= 0x10;
    const std::string path = tmp_.file("corrupt_" + name + ".cuvir");
    test::write_bytes(path, bad);
    RunResult r = run_tool(tmp_.path(), CUVIL_RUN, {path, "--shape", "x=1x3"});
    EXPECT_EQ(r.exit_code, 3) << name << ": " << r.err;
    EXPECT_MENTIONS(r.err, name);
    EXPECT_MENTIONS(r.err, "checksum");
    ++flipped;
  }
  EXPECT_GE(flipped, 3);
  // Truncated and empty packages are invalid too.
  test::write_bytes(tmp_.file("short.cuvir"), bytes.substr(0, bytes.size() / 2));
  RunResult r = run_tool(tmp_.path(), CUVIL_RUN, {tmp_.file("short.cuvir"), "--shape", "x=1x3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  test::write_bytes(tmp_.file("empty.cuvir"), "");
  r = run_tool(tmp_.path(), CUVIL_RUN, {tmp_.file("empty.cuvir")});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_MENTIONS(r.err, "empty");
}

TEST_F(CliRun, MissingPackageIsAnIoError) {
  RunResult r = run_tool(tmp_.path(), CUVIL_RUN, {tmp_.file("missing.cuvir"), "--shape", "x=1x3"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_MENTIONS(r.err, tmp_.file("missing.cuvir"));
  // A directory is not a package either.
  r = run_tool(tmp_.path(), CUVIL_RUN, {tmp_.path(), "--shape", "x=1x3"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_MENTIONS(r.err, tmp_.path());
}

TEST_F(CliRun, UsageErrors) {
  RunResult r = run_tool(tmp_.path(), CUVIL_RUN, {});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = run({"--input", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "name=path");
  r = run({"--input", "x="});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "name=path");
  r = run({"--shape", "=2x3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = run({"--bench", "-1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace cuvil
