// Run traces and session metrics through the C API (suite RunTrace), and cuvil-run's --trace
// and --report (suite CliRunTrace):
// - the trace is JSON that a strict reader accepts, in Trace Event form (complete "X" events,
//   thread-name metadata); every kernel call of a run (cuvil_run_stats.kernel_calls) has one
//   slice on the calling thread's track, named after an ONNX node of the model; every slice
//   lies inside its run's "run" slice; a worker's slice lies inside the caller's slice of the
//   same kernel call;
// - tracing off records nothing; writing without ever enabling it, or to a path that cannot
//   be written, is an error naming the path;
// - the session counters count runs, failures and the arena;
// - cuvil-run writes both files, and reports bad paths with exit 5 naming them.
#include <gtest/gtest.h>

#include <set>  // std::set, std::multiset
#include <string>
#include <vector>

#include "json_test_util.h"
#include "run_tool.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using namespace test;  // NOLINT: the harness

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" << (text)

const std::set<std::string> kNodeNames = {"mm", "add", "relu", "neg"};

// x: f32[n, 32] -> MatMul(w) "mm" -> Add(bias) "add" -> Relu "relu" -> Neg "neg" -> y
onnx::ModelProto traced_model() {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x", Tp::FLOAT, {"n", 32});
  std::vector<float> w(32 * 32), bias(32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 7) - 3) / 8.f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i % 5) / 4.f;
  *g->add_initializer() = make_float_tensor("w", {32, 32}, w);
  *g->add_initializer() = make_float_tensor("bias", {32}, bias);
  add_node(g, "MatMul", {"x", "w"}, {"h"}, "mm");
  add_node(g, "Add", {"h", "bias"}, {"s"}, "add");
  add_node(g, "Relu", {"s"}, {"r"}, "relu");
  add_node(g, "Neg", {"r"}, {"y"}, "neg");
  add_output(g, "y", Tp::FLOAT, {"n", 32});
  return m;
}

Json parse_file(const std::string& path) {
  Json j;
  std::string error;
  const std::string text = read_bytes(path);
  EXPECT_TRUE(JsonParser(text).parse(&j, &error)) << path << ": " << error << "\n" << text.substr(0, 2000);
  return j;
}

struct Slice {
  std::string name, cat;
  int tid = 0;
  double ts = 0, end = 0;
  int64_t pc = -1;
};

// The complete ("X") events of a trace, after checking the trace's overall form.
std::vector<Slice> slices_of(const Json& trace) {
  std::vector<Slice> out;
  EXPECT_EQ(trace.type, Json::Type::kObject);
  const Json& events = trace["traceEvents"];
  EXPECT_EQ(events.type, Json::Type::kArray);
  bool named_caller = false;
  for (const Json& e : events.array) {
    EXPECT_TRUE(e.has("ph") && e.has("pid") && e.has("tid") && e.has("name"));
    if (e["ph"].string == "M") {
      if (e["name"].string == "thread_name" && e["tid"].number == 0) named_caller = e["args"]["name"].string == "caller";
      continue;
    }
    EXPECT_EQ(e["ph"].string, "X");
    EXPECT_TRUE(e.has("ts") && e.has("dur") && e.has("cat"));
    EXPECT_GE(e["dur"].number, 0);
    Slice s;
    s.name = e["name"].string;
    s.cat = e["cat"].string;
    s.tid = static_cast<int>(e["tid"].number);
    s.ts = e["ts"].number;
    s.end = s.ts + e["dur"].number;
    if (e["args"].has("pc")) s.pc = static_cast<int64_t>(e["args"]["pc"].number);
    out.push_back(s);
  }
  EXPECT_TRUE(named_caller) << "no thread_name metadata for the caller's track";
  return out;
}

void run_once(cuvil_session* s, int64_t rows) {
  std::vector<float> x(static_cast<size_t>(rows) * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 11) - 5) / 4.f;
  ASSERT_TRUE(Ok(set_f32(s, "x", {rows, 32}, x)));
  ASSERT_TRUE(Ok(cuvil_session_run(s)));
}

void check_one_run_trace(bool fuse) {
  SCOPED_TRACE(fuse ? "fused" : "unfused");
  TempDir dir;
  ModelPtr model = load(compile(traced_model(), {}, fuse));
  SessionPtr s = open_session(model.get(), 2);
  ASSERT_TRUE(Ok(cuvil_session_enable_run_stats(s.get(), 1)));
  ASSERT_TRUE(Ok(cuvil_session_enable_trace(s.get(), 1)));
  run_once(s.get(), 64);
  cuvil_run_stats stats{};
  ASSERT_TRUE(Ok(cuvil_session_get_run_stats(s.get(), &stats)));
  ASSERT_TRUE(Ok(cuvil_session_enable_trace(s.get(), 0)));
  run_once(s.get(), 64);  // not recorded: tracing is off again
  const std::string path = dir.path() + "/trace.json";
  ASSERT_TRUE(Ok(cuvil_session_write_trace(s.get(), path.c_str())));
  std::vector<Slice> slices = slices_of(parse_file(path));
  int runs = 0, binds = 0;
  Slice run;
  std::vector<Slice> calls;
  for (const Slice& sl : slices) {
    if (sl.name == "run" && sl.cat == "run") {
      ++runs;
      run = sl;
    } else if (sl.name == "bind" && sl.cat == "run") {
      ++binds;
    } else if (sl.tid == 0) {
      calls.push_back(sl);
    }
  }
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(binds, 1);
  ASSERT_GT(stats.kernel_calls, 0);
  EXPECT_EQ(static_cast<int64_t>(calls.size()), stats.kernel_calls) << "one slice per kernel call";
  std::set<int64_t> pcs;
  for (const Slice& c : calls) {
    EXPECT_TRUE(kNodeNames.count(c.name)) << "slice '" << c.name << "' is not named after a node of the model";
    EXPECT_TRUE(c.cat == "op" || c.cat == "kernel") << c.cat;
    EXPECT_GE(c.ts, run.ts);
    EXPECT_LE(c.end, run.end);
    EXPECT_GE(c.pc, 0);
    pcs.insert(c.pc);
  }
  EXPECT_EQ(pcs.size(), calls.size()) << "each call of a straight-line program is its own instruction";
  // The passes fold the Add and the Relu into the MatMul (cuvil::FusedMatMul "mm"): unfused,
  // the program runs "mm" and "neg", each once; fused, one tile kernel (the MatMul loop with
  // its epilogue and the Neg) named after its last node.
  std::multiset<std::string> names;
  for (const Slice& c : calls) names.insert(c.name);
  const std::multiset<std::string> want =
      fuse ? std::multiset<std::string>{"neg"} : std::multiset<std::string>{"mm", "neg"};
  EXPECT_EQ(names, want);
}

TEST(RunTrace, OneSlicePerKernelCallNamedAfterItsNode) {
  check_one_run_trace(false);
  check_one_run_trace(true);
}

// A worker's slice is a kernel call it took part in: same name and instruction as a slice of
// the calling thread, and inside it in time. Whether a worker takes a chunk of a given call is
// up to the scheduler, so the test runs until some worker has (on two threads, at once).
// x: f32[n, 256] -> Sigmoid "sig" -> Neg "neg" -> y: one tile kernel of many tiles.
onnx::ModelProto elementwise_model() {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x", Tp::FLOAT, {"n", 256});
  add_node(g, "Sigmoid", {"x"}, {"s"}, "sig");
  add_node(g, "Neg", {"s"}, {"y"}, "neg");
  add_output(g, "y", Tp::FLOAT, {"n", 256});
  return m;
}

TEST(RunTrace, WorkerSlicesLieInsideTheCallersSlice) {
  TempDir dir;
  ModelPtr model = load(compile(elementwise_model(), {}, true));
  SessionPtr s = open_session(model.get(), 2);
  ASSERT_TRUE(Ok(cuvil_session_enable_trace(s.get(), 1)));
  const std::string path = dir.path() + "/trace.json";
  size_t worker_slices = 0;
  for (int attempt = 0; attempt < 50 && worker_slices == 0; ++attempt) {
    std::vector<float> x(size_t{8192} * 256, 0.5f);
    ASSERT_TRUE(Ok(set_f32(s.get(), "x", {8192, 256}, x)));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    ASSERT_TRUE(Ok(cuvil_session_write_trace(s.get(), path.c_str())));
    std::vector<Slice> slices = slices_of(parse_file(path));
    std::vector<Slice> caller;
    for (const Slice& sl : slices)
      if (sl.tid == 0 && sl.cat != "run") caller.push_back(sl);
    for (const Slice& w : slices) {
      if (w.tid == 0) continue;
      ++worker_slices;
      EXPECT_EQ(w.tid, 1) << "a 2-thread session has one worker";
      EXPECT_EQ(w.name, "neg") << "the tile kernel is named after the last node it runs";
      bool inside = false;
      for (const Slice& c : caller)
        inside = inside || (c.name == w.name && c.pc == w.pc && c.ts <= w.ts && w.end <= c.end);
      EXPECT_TRUE(inside) << "worker slice '" << w.name << "' [" << w.ts << ", " << w.end
                          << "] is inside no caller slice of the same kernel call";
    }
  }
  EXPECT_GT(worker_slices, 0u) << "in 50 runs of 8192 rows the worker never took a chunk";
}

TEST(RunTrace, WritingWithoutTracingOrToABadPathIsAnError) {
  TempDir dir;
  ModelPtr model = load(compile(traced_model()));
  SessionPtr s = open_session(model.get(), 1);
  const std::string path = dir.path() + "/t.json";
  EXPECT_TRUE(Fails(cuvil_session_write_trace(s.get(), path.c_str()), CUVIL_INVALID_ARGUMENT,
                    {path, "tracing was never enabled"}));
  ASSERT_TRUE(Ok(cuvil_session_enable_trace(s.get(), 1)));
  run_once(s.get(), 4);
  const std::string bad = dir.path() + "/no/such/dir/t.json";
  EXPECT_TRUE(Fails(cuvil_session_write_trace(s.get(), bad.c_str()), CUVIL_IO, {bad, "No such file"}));
  EXPECT_TRUE(Fails(cuvil_session_write_trace(s.get(), ""), CUVIL_INVALID_ARGUMENT, {"empty path"}));
  EXPECT_TRUE(Fails(cuvil_session_write_trace(nullptr, path.c_str()), CUVIL_INVALID_ARGUMENT, {"null session"}));
  EXPECT_EQ(list_dir(dir.path()), std::set<std::string>{}) << "no temporary left behind";
}

TEST(RunTrace, AFailedRunIsTracedWithItsStatus) {
  TempDir dir;
  ModelPtr model = load(compile(traced_model()));
  SessionPtr s = open_session(model.get(), 1);
  ASSERT_TRUE(Ok(cuvil_session_enable_trace(s.get(), 1)));
  EXPECT_TRUE(Fails(cuvil_session_run(s.get()), CUVIL_INVALID_ARGUMENT, {"'x' is not set"}));
  const std::string path = dir.path() + "/t.json";
  ASSERT_TRUE(Ok(cuvil_session_write_trace(s.get(), path.c_str())));
  Json trace = parse_file(path);
  int runs = 0;
  for (const Json& e : trace["traceEvents"].array)
    if (e["name"].string == "run") {
      ++runs;
      EXPECT_EQ(e["args"]["status"].number, CUVIL_INVALID_ARGUMENT);
    }
  EXPECT_EQ(runs, 1);
}

TEST(RunTrace, SessionMetricsCountRunsFailuresAndTheArena) {
  ModelPtr model = load(compile(traced_model(), {}, false));
  SessionPtr s = open_session(model.get(), 2);
  cuvil_session_metrics m{};
  ASSERT_TRUE(Ok(cuvil_session_get_metrics(s.get(), &m)));
  EXPECT_EQ(m.runs, 0);
  EXPECT_EQ(m.threads, 2);
  run_once(s.get(), 64);
  ASSERT_TRUE(Ok(cuvil_session_get_metrics(s.get(), &m)));
  const int64_t arena64 = m.arena_bytes;
  EXPECT_GE(arena64, 64 * 32 * 4) << "the unfused chain keeps [64, 32] floats in the arena";
  run_once(s.get(), 8);
  EXPECT_TRUE(Fails(cuvil_session_run(s.get()), CUVIL_INVALID_ARGUMENT, {"not set"}));
  ASSERT_TRUE(Ok(cuvil_session_get_metrics(s.get(), &m)));
  EXPECT_EQ(m.runs, 3);
  EXPECT_EQ(m.failures, 1);
  EXPECT_GT(m.run_ns, 0);
  EXPECT_LT(m.arena_bytes, arena64) << "the last successful run bound 8 rows";
  EXPECT_EQ(m.arena_peak_bytes, arena64);
  EXPECT_TRUE(Fails(cuvil_session_get_metrics(nullptr, &m), CUVIL_INVALID_ARGUMENT, {"null session"}));
  const std::string path = cuvil_cpu_path();
  EXPECT_TRUE(path == "portable" || path == "avx2" || path == "avx512") << path;
}

// ---- cuvil-run --trace / --report ----

class CliRunTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    onnx_path_ = dir_.path() + "/m.onnx";
    pkg_ = dir_.path() + "/m.cuvir";
    std::string bytes;
    ASSERT_TRUE(traced_model().SerializeToString(&bytes));
    write_bytes(onnx_path_, bytes);
    RunResult r = run_tool(dir_.path(), CUVIL_CUVILC, {"compile", onnx_path_, "-o", pkg_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  TempDir dir_;
  std::string onnx_path_, pkg_;
};

TEST_F(CliRunTrace, WritesTraceAndReport) {
  const std::string trace = dir_.path() + "/trace.json", rep = dir_.path() + "/run.json";
  RunResult r = run_tool(dir_.path(), CUVIL_RUN,
                         {pkg_, "--shape", "x=16x32", "--threads", "2", "--bench", "5", "--warmup", "1",
                          "--trace", trace, "--report", rep});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<Slice> slices = slices_of(parse_file(trace));
  int runs = 0, calls = 0;
  for (const Slice& sl : slices) {
    if (sl.name == "run") ++runs;
    if (sl.tid == 0 && sl.cat != "run") {
      ++calls;
      EXPECT_TRUE(kNodeNames.count(sl.name)) << sl.name;
    }
  }
  EXPECT_EQ(runs, 1) << "--trace records the first run only";
  EXPECT_GT(calls, 0);
  Json report = parse_file(rep);
  EXPECT_EQ(report["threads"].number, 2);
  EXPECT_EQ(report["bucket"].number, 0);
  EXPECT_EQ(report["timed_runs"].number, 5);
  EXPECT_EQ(report["warmup_runs"].number, 1);
  const Json& lat = report["latency_ms"];
  EXPECT_GT(lat["p50"].number, 0);
  EXPECT_LE(lat["min"].number, lat["p50"].number);
  EXPECT_LE(lat["p50"].number, lat["p90"].number);
  EXPECT_LE(lat["p90"].number, lat["p99"].number);
  EXPECT_LE(lat["p99"].number, lat["max"].number);
  EXPECT_GE(report["arena_bytes"].number, 0);
  EXPECT_GE(report["arena_peak_bytes"].number, report["arena_bytes"].number);
  EXPECT_EQ(report["session_runs"].number, 1 + 1 + 5 + 5) << "first run, warmup, timed, overhead runs";
  EXPECT_EQ(report["inputs"]["x"]["shape"].array.size(), 2u);
  const std::string path = report["kernel_path"].string;
  EXPECT_TRUE(path == "portable" || path == "avx2" || path == "avx512") << path;
}

TEST_F(CliRunTrace, ReportWithoutBenchTimesTheOneRun) {
  const std::string rep = dir_.path() + "/run.json";
  RunResult r = run_tool(dir_.path(), CUVIL_RUN, {pkg_, "--shape", "x=2x32", "--report", rep});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json report = parse_file(rep);
  EXPECT_EQ(report["timed_runs"].number, 1);
  EXPECT_GT(report["latency_ms"]["max"].number, 0);
}

// --trace-run N traces run N, after N - 1 untraced runs; it needs --trace.
TEST_F(CliRunTrace, TraceRunTracesALaterRun) {
  const std::string trace = dir_.path() + "/trace.json", rep = dir_.path() + "/run.json";
  RunResult r = run_tool(dir_.path(), CUVIL_RUN,
                         {pkg_, "--shape", "x=4x32", "--trace", trace, "--trace-run", "3", "--report", rep});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int runs = 0;
  for (const Slice& sl : slices_of(parse_file(trace))) runs += sl.name == "run";
  EXPECT_EQ(runs, 1) << "one run traced";
  EXPECT_EQ(parse_file(rep)["session_runs"].number, 3) << "two untraced runs, then the traced one";
  r = run_tool(dir_.path(), CUVIL_RUN, {pkg_, "--shape", "x=4x32", "--trace-run", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "--trace-run");
  r = run_tool(dir_.path(), CUVIL_RUN, {pkg_, "--shape", "x=4x32", "--trace", trace, "--trace-run", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST_F(CliRunTrace, BadPathsAreIoErrorsNamingThePath) {
  const std::string bad = dir_.path() + "/missing/trace.json";
  RunResult r = run_tool(dir_.path(), CUVIL_RUN, {pkg_, "--shape", "x=2x32", "--trace", bad});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_MENTIONS(r.err, "--trace");
  EXPECT_MENTIONS(r.err, bad);
  r = run_tool(dir_.path(), CUVIL_RUN, {pkg_, "--shape", "x=2x32", "--report", bad});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_MENTIONS(r.err, "--report");
  EXPECT_MENTIONS(r.err, bad);
  // Never over the package it reads.
  r = run_tool(dir_.path(), CUVIL_RUN, {pkg_, "--shape", "x=2x32", "--trace", pkg_});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "--trace '" + pkg_ + "' names the same file as the package");
  r = run_tool(dir_.path(), CUVIL_RUN, {pkg_, "--shape", "x=2x32", "--trace", bad + "x", "--report", bad + "x"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "--trace and --report name the same file");
}

}  // namespace
}  // namespace cuvil
