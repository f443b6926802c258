// KV cache as session state (docs/kv_cache.md): recognition of past/present pairs
// (passes/kv_cache.h), the STATE section (round trip and a malformed record), and the session
// that keeps the cache (runtime/session.h): greedy decoding equal to ONNX Runtime's loop on the
// two tiny decoders of testdata/models/kv (export_decoders.py, kv_greedy_reference.py), the
// state calls of the C API, a failed run that leaves the cache as it was, and a run past the
// maximum length. Packages are compiled with the real cuvilc; `cuvil-run --generate` is
// tested in the CliGenerate suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/npy.h"
#include "cuvil.h"
#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "onnx_builder.h"
#include "passes/kv_cache.h"
#include "passes/pipeline.h"
#include "run_tool.h"
#include "runtime/crc32.h"
#include "runtime/package.h"
#include "runtime/testing_hooks.h"
#include "support/error.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::TempDir;

const std::string kKv = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/kv/";

Model import_with(const std::string& file, const std::vector<std::string>& dims) {
  frontend::ImportOptions options;
  for (const auto& d : dims) options.dims.push_back(frontend::parse_dim_option(d));
  Model m = frontend::import_onnx_file(file, options);
  verify_model(m);
  run_passes(m);
  return m;
}

std::vector<int64_t> reference_tokens(const std::string& model) {
  std::ifstream in(kKv + model + ".tokens.txt");
  std::vector<int64_t> ids;
  int64_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

// ---- recognition ----

TEST(KvCacheRecognition, FindsEveryPairOfBothDecoders) {
  for (const auto& [model, heads] : {std::pair<std::string, int64_t>{"gpt2_kv", 4}, {"llama_kv", 2}}) {
    SCOPED_TRACE(model);
    const Model m = import_with(kKv + model + ".onnx", {"batch=1", "past=0:64"});
    const KvCacheAnalysis a = find_kv_cache(m, KvCacheMode::kAuto);
    EXPECT_EQ(a.why_not, "");
    ASSERT_EQ(a.pairs.size(), 4u);
    const char* names[4][2] = {{"past_key_0", "present_key_0"}, {"past_value_0", "present_value_0"},
                               {"past_key_1", "present_key_1"}, {"past_value_1", "present_value_1"}};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(a.pairs[i].input, names[i][0]);
      EXPECT_EQ(a.pairs[i].output, names[i][1]);
      EXPECT_EQ(a.pairs[i].symbol, "past");
      EXPECT_EQ(a.pairs[i].axis, 2);
      EXPECT_EQ(a.pairs[i].max_dims, (std::vector<int64_t>{1, heads, 64, 16}));
    }
    EXPECT_EQ(kv_cache_note(a).rfind("4 pairs kept as state (length symbol past, at most 64):", 0), 0u)
        << kv_cache_note(a);
    EXPECT_TRUE(find_kv_cache(m, KvCacheMode::kOff).pairs.empty());
  }
}

// fuse-attention takes the cache's Concat into cuvil::Attention (past_key/past_value in,
// present_key/present_value out): those pairs are found too.
TEST(KvCacheRecognition, FindsPairsInsideFusedAttention) {
  const Model m = import_with(std::string(CUVIL_SOURCE_DIR) + "/testdata/models/gpt2_tiny_past.onnx",
                              {"batch=1", "past=0:32", "seq=1:32", "total=1:32"});
  int attention = 0, concat_into_output = 0;
  for (const Node& n : m.graph->nodes) {
    attention += n.op == OpKind::Attention;
    for (ValueId o : m.graph->outputs) concat_into_output += n.op == OpKind::Concat && n.outputs[0] == o;
  }
  EXPECT_EQ(attention, 2);
  EXPECT_EQ(concat_into_output, 0);
  const KvCacheAnalysis a = find_kv_cache(m, KvCacheMode::kAuto);
  ASSERT_EQ(a.pairs.size(), 4u) << a.why_not;
  EXPECT_EQ(a.pairs[0].input, "past_key_0");
  EXPECT_EQ(a.pairs[0].output, "present_key_0");
  EXPECT_EQ(a.pairs[3].input, "past_value_1");
  EXPECT_EQ(a.pairs[3].output, "present_value_1");
  EXPECT_EQ(a.pairs[3].max_dims, (std::vector<int64_t>{1, 4, 32, 32}));
}

// The structure decides, not the names: a decoder without a cache has no pair.
TEST(KvCacheRecognition, NoPairWithoutAConcatOfAnInputIntoAnOutput) {
  const Model m = import_with(std::string(CUVIL_SOURCE_DIR) + "/testdata/models/gpt2_tiny.onnx", {"batch=1"});
  const KvCacheAnalysis a = find_kv_cache(m, KvCacheMode::kAuto);
  EXPECT_TRUE(a.pairs.empty());
  EXPECT_EQ(a.found, 0u);
  EXPECT_EQ(kv_cache_note(a), "none");
  try {
    find_kv_cache(m, KvCacheMode::kOn);
    ADD_FAILURE() << "--kv-cache on accepted a model without a cache";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(d.what()).find("--kv-cache on: no cache pair found"), std::string::npos) << d.what();
  }
}

// An unbounded past cannot size the state: auto says so in the report, on refuses.
TEST(KvCacheRecognition, UnboundedRangeIsNotKeptUnderAutoAndRefusedUnderOn) {
  const Model m = import_with(kKv + "gpt2_kv.onnx", {"batch=1"});
  const KvCacheAnalysis a = find_kv_cache(m, KvCacheMode::kAuto);
  EXPECT_TRUE(a.pairs.empty());
  EXPECT_EQ(a.found, 4u);
  const std::string why = "the state 'past_key_0' is sized by the range of 'past' (dim 2), which is 0: with no "
                          "upper bound; give --dim past=0:N (or dims: in the config)";
  EXPECT_EQ(a.why_not, why);
  EXPECT_EQ(kv_cache_note(a), "4 cache pairs found, not kept as state: " + why);
  try {
    find_kv_cache(m, KvCacheMode::kOn);
    ADD_FAILURE() << "unbounded past accepted";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(d.what()).find("--kv-cache on: " + why), std::string::npos) << d.what();
  }
  // The batch symbol sizes the state too.
  const Model unbatched = import_with(kKv + "gpt2_kv.onnx", {"past=0:8"});
  const std::string batch_why = find_kv_cache(unbatched, KvCacheMode::kAuto).why_not;
  EXPECT_NE(batch_why.find("range of 'batch' (dim 0), which is 0: with no upper bound; give --dim batch=0:N"),
            std::string::npos)
      << batch_why;
}

// ---- runtime ----

struct ModelDeleter {
  void operator()(cuvil_model* m) const { cuvil_model_release(m); }
};
struct SessionDeleter {
  void operator()(cuvil_session* s) const { cuvil_session_release(s); }
};
using ModelPtr = std::unique_ptr<cuvil_model, ModelDeleter>;
using SessionPtr = std::unique_ptr<cuvil_session, SessionDeleter>;

std::string take(cuvil_status st) {
  if (!st) return "";
  std::string m = std::to_string(cuvil_status_code_of(st)) + ": " + cuvil_status_message(st);
  cuvil_status_free(st);
  return m;
}

// Packages compiled once per process (cuvilc, --dim batch=1, past 0:max_past).
class KvPackages {
 public:
  static KvPackages& get() {
    static KvPackages p;
    return p;
  }
  std::string package(const std::string& model, int max_past = 64, const std::string& extra = "") {
    const std::string path = dir_.file(model + "_" + std::to_string(max_past) + extra + ".cuvir");
    if (std::ifstream(path).good()) return path;
    const std::string onnx = std::ifstream(kKv + model + ".onnx").good()
                                 ? kKv + model + ".onnx"
                                 : std::string(CUVIL_SOURCE_DIR) + "/testdata/models/" + model + ".onnx";
    std::vector<std::string> args = {"compile", onnx, "--dim", "batch=1", "--dim",
                                     "past=0:" + std::to_string(max_past), "--dim", "seq=1:64", "--dim", "total=1:64",
                                     "-o", path};
    if (!extra.empty()) args.push_back(extra);
    const RunResult r = test::run_tool(dir_.path(), CUVIL_CUVILC, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
  }
  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
};

ModelPtr load(const std::string& path) {
  cuvil_model* m = nullptr;
  EXPECT_EQ(take(cuvil_model_load_file(path.c_str(), &m)), "");
  return ModelPtr(m);
}

SessionPtr session_of(cuvil_model* m, int64_t deadline_ms = 0, int threads = 2) {
  cuvil_session_options o;
  cuvil_session_options_init(&o);
  o.threads = threads;
  o.deadline_ms = deadline_ms;
  cuvil_session* s = nullptr;
  EXPECT_EQ(take(cuvil_session_create(m, &o, &s)), "");
  return SessionPtr(s);
}

bool has_input(cuvil_model* m, const std::string& name) {
  for (size_t i = 0; i < cuvil_model_input_count(m); ++i) {
    cuvil_tensor_info info;
    cuvil_model_input_info(m, i, &info);
    if (name == info.name) return true;
  }
  return false;
}

// One run on `ids` at the session's cache length; "" or the failure. *logits gets the last
// position's row.
std::string step(cuvil_model* m, cuvil_session* s, const std::vector<int64_t>& ids, std::vector<float>* logits) {
  int64_t length = 0;
  if (std::string e = take(cuvil_session_state_length(s, &length)); !e.empty()) return e;
  const int64_t seq = static_cast<int64_t>(ids.size());
  const int64_t ids_dims[2] = {1, seq}, mask_dims[2] = {1, length + seq};
  std::vector<int64_t> mask(static_cast<size_t>(length + seq), 1), positions(ids.size());
  for (int64_t i = 0; i < seq; ++i) positions[static_cast<size_t>(i)] = length + i;
  if (std::string e = take(cuvil_session_set_input(s, "input_ids", 7, 2, ids_dims, ids.data(), ids.size() * 8));
      !e.empty())
    return e;
  if (std::string e = take(cuvil_session_set_input(s, "attention_mask", 7, 2, mask_dims, mask.data(), mask.size() * 8));
      !e.empty())
    return e;
  if (has_input(m, "position_ids"))
    if (std::string e = take(cuvil_session_set_input(s, "position_ids", 7, 2, ids_dims, positions.data(),
                                                     positions.size() * 8));
        !e.empty())
      return e;
  if (std::string e = take(cuvil_session_run(s)); !e.empty()) return e;
  cuvil_tensor_info info;
  const void* data = nullptr;
  size_t bytes = 0;
  if (std::string e = take(cuvil_session_get_output(s, 0, &info, &data, &bytes)); !e.empty()) return e;
  const int64_t vocab = info.dims[2];
  const float* row = static_cast<const float*>(data) + (info.dims[1] - 1) * vocab;
  if (logits) logits->assign(row, row + vocab);
  return "";
}

int64_t argmax(const std::vector<float>& v) {
  int64_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  return best;
}

std::vector<int64_t> prompt() {
  tools::HostTensor t;
  EXPECT_EQ(tools::read_npy(kKv + "prompt.npy", &t), "");
  std::vector<int64_t> ids(t.bytes.size() / 8);
  std::memcpy(ids.data(), t.bytes.data(), t.bytes.size());
  return ids;
}

std::vector<int64_t> greedy(cuvil_model* m, cuvil_session* s, size_t n) {
  std::vector<int64_t> out;
  std::vector<int64_t> ids = prompt();
  std::vector<float> logits;
  for (size_t i = 0; i < n; ++i) {
    const std::string e = step(m, s, ids, &logits);
    EXPECT_EQ(e, "") << "step " << i;
    if (!e.empty()) break;
    out.push_back(argmax(logits));
    ids = {out.back()};
  }
  return out;
}

// The committed contents of state `name` (batch 1 at most [1, heads, length, head_dim]).
std::vector<float> state_contents(cuvil_session* s, const char* name) {
  cuvil_tensor_info info;
  take(cuvil_session_read_state(s, name, &info, nullptr, 0));  // sizes info (too small a buffer)
  int64_t n = 1;
  for (int32_t k = 0; k < info.rank; ++k) n *= info.dims[k];
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_EQ(take(cuvil_session_read_state(s, name, &info, out.data(), out.size() * 4)), "");
  return out;
}

std::string manifest_of(const std::string& path) {
  std::shared_ptr<rt::LoadedPackage> pkg;
  EXPECT_TRUE(rt::LoadedPackage::open_file(path, &pkg).is_ok());
  return pkg ? pkg->manifest().text + "\n" + pkg->report() : "";
}

// Writes saved[i] (f32, dims[i]) into state i of the session; "" or the first failure.
std::string write_states(cuvil_model* m, cuvil_session* s, const std::vector<std::vector<int64_t>>& dims,
                         const std::vector<std::vector<float>>& saved) {
  for (size_t i = 0; i < saved.size(); ++i) {
    cuvil_state_info si;
    if (std::string e = take(cuvil_model_state_info(m, i, &si)); !e.empty()) return e;
    const int32_t rank = static_cast<int32_t>(dims[i].size());
    if (std::string e = take(cuvil_session_write_state(s, si.name, 1, rank, dims[i].data(), saved[i].data(),
                                                       saved[i].size() * 4));
        !e.empty())
      return e;
  }
  return "";
}

TEST(KvCache, GreedyTokensEqualOnnxRuntimesLoop) {
  for (const std::string model : {"gpt2_kv", "llama_kv", "gpt2_tiny_past"}) {
    SCOPED_TRACE(model);
    ModelPtr m = load(KvPackages::get().package(model));
    ASSERT_TRUE(m);
    ASSERT_EQ(cuvil_model_state_count(m.get()), 4u);
    cuvil_state_info info;
    ASSERT_EQ(take(cuvil_model_state_info(m.get(), 1, &info)), "");
    EXPECT_STREQ(info.name, "past_value_0");
    EXPECT_STREQ(info.output, "present_value_0");
    EXPECT_STREQ(info.length_symbol, "past");
    EXPECT_EQ(info.axis, 2);
    EXPECT_EQ(info.max_dims[2], 64);
    EXPECT_EQ(info.max_dims[3], model == "gpt2_tiny_past" ? 32 : 16);
    const std::vector<int64_t> expected = reference_tokens(model);
    ASSERT_EQ(expected.size(), 16u);
    for (int threads : {1, 2}) {
      SessionPtr s = session_of(m.get(), 0, threads);
      EXPECT_EQ(greedy(m.get(), s.get(), expected.size()), expected) << threads << " threads";
      int64_t length = 0;
      ASSERT_EQ(take(cuvil_session_state_length(s.get(), &length)), "");
      EXPECT_EQ(length, static_cast<int64_t>(prompt().size() + expected.size() - 1));
      // A reset starts the same sequence again.
      ASSERT_EQ(take(cuvil_session_reset_state(s.get())), "");
      EXPECT_EQ(greedy(m.get(), s.get(), 4), std::vector<int64_t>(expected.begin(), expected.begin() + 4));
    }
  }
}

// With shape buckets (seq 1 and 2..64: the prefill and the decode steps run different
// programs) the programs share the state.
TEST(KvCache, BucketProgramsShareTheState) {
  ModelPtr m = load(KvPackages::get().package("llama_kv", 64, "--buckets=seq=1"));
  SessionPtr s = session_of(m.get());
  EXPECT_EQ(greedy(m.get(), s.get(), 16), reference_tokens("llama_kv"));
  cuvil_session_metrics metrics;
  ASSERT_EQ(take(cuvil_session_get_metrics(s.get(), &metrics)), "");
  EXPECT_EQ(metrics.bucket, 0);  // the last step, seq 1
}

TEST(KvCache, StateInputsAreTheSessions) {
  ModelPtr m = load(KvPackages::get().package("gpt2_kv"));
  SessionPtr s = session_of(m.get());
  const int64_t dims[4] = {1, 4, 0, 16};
  EXPECT_EQ(take(cuvil_session_set_input(s.get(), "past_key_0", 1, 4, dims, nullptr, 0)),
            "1: input 'past_key_0' is session state (KV cache): the session binds it to the committed cache; use "
            "the state calls (cuvil_session_write_state) to change it");
  EXPECT_EQ(take(cuvil_session_read_state(s.get(), "present_key_0", nullptr, nullptr, 0)),
            "1: no state named 'present_key_0' (states: 'past_key_0', 'past_value_0', 'past_key_1', 'past_value_1')");
}

// The batch is fixed while the cache holds rows: another batch is refused until a reset; a
// state written with the wrong dtype is refused; a package without state names that.
TEST(KvCache, ShapeAndDtypeMisuseIsRefused) {
  ModelPtr m = load(KvPackages::get().package("gpt2_kv", 16, "--dim=batch=1:2"));
  SessionPtr s = session_of(m.get());
  ASSERT_EQ(step(m.get(), s.get(), {1, 2, 3}, nullptr), "");
  const int64_t ids_dims[2] = {2, 1}, mask_dims[2] = {2, 4};
  const int64_t ids[2] = {4, 5}, mask[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  ASSERT_EQ(take(cuvil_session_set_input(s.get(), "input_ids", 7, 2, ids_dims, ids, 16)), "");
  ASSERT_EQ(take(cuvil_session_set_input(s.get(), "attention_mask", 7, 2, mask_dims, mask, 64)), "");
  EXPECT_EQ(take(cuvil_session_run(s.get())),
            "5: state 'past_key_0' holds [1, 4, 3, 16] but input 'input_ids' dim 0 is 2; reset the state to start a "
            "sequence of another shape");
  ASSERT_EQ(take(cuvil_session_reset_state(s.get())), "");
  ASSERT_EQ(take(cuvil_session_set_input(s.get(), "input_ids", 7, 2, ids_dims, ids, 16)), "");
  const int64_t first_mask_dims[2] = {2, 1};
  ASSERT_EQ(take(cuvil_session_set_input(s.get(), "attention_mask", 7, 2, first_mask_dims, mask, 16)), "");
  EXPECT_EQ(take(cuvil_session_run(s.get())), "");
  const int64_t dims[4] = {1, 4, 2, 16};
  std::vector<int32_t> ints(4 * 2 * 16);
  EXPECT_EQ(take(cuvil_session_write_state(s.get(), "past_key_0", 6, 4, dims, ints.data(), ints.size() * 4)),
            "1: state 'past_key_0': dtype i32, expected f32");
  ModelPtr off = load(KvPackages::get().package("gpt2_kv", 16, "--kv-cache=off"));
  SessionPtr plain = session_of(off.get());
  EXPECT_EQ(take(cuvil_session_read_state(plain.get(), "past_key_0", nullptr, nullptr, 0)),
            "1: no state named 'past_key_0' (states: none, the package has no STATE)");
  int64_t length = -1;
  ASSERT_EQ(take(cuvil_session_state_length(plain.get(), &length)), "");
  EXPECT_EQ(length, 0);
}

// read_state / write_state: a cache read out, the session reset and the cache written back
// continues exactly as the uninterrupted session does.
TEST(KvCache, ReadResetWriteContinuesTheSequence) {
  ModelPtr m = load(KvPackages::get().package("llama_kv"));
  SessionPtr a = session_of(m.get()), b = session_of(m.get());
  std::vector<float> la, lb;
  ASSERT_EQ(step(m.get(), a.get(), prompt(), &la), "");
  ASSERT_EQ(step(m.get(), b.get(), prompt(), &lb), "");
  std::vector<std::vector<float>> saved(4);
  std::vector<std::vector<int64_t>> dims(4);
  for (size_t i = 0; i < 4; ++i) {
    cuvil_state_info si;
    ASSERT_EQ(take(cuvil_model_state_info(m.get(), i, &si)), "");
    cuvil_tensor_info info;
    EXPECT_EQ(take(cuvil_session_read_state(b.get(), si.name, &info, nullptr, 0)).rfind("1: state '", 0), 0u);
    saved[i].resize(1 * 2 * 8 * 16);
    ASSERT_EQ(take(cuvil_session_read_state(b.get(), si.name, &info, saved[i].data(), saved[i].size() * 4)), "");
    EXPECT_STREQ(info.shape, "[1, 2, 8, 16]");
    dims[i].assign(info.dims, info.dims + info.rank);
  }
  ASSERT_EQ(take(cuvil_session_reset_state(b.get())), "");
  int64_t length = -1;
  ASSERT_EQ(take(cuvil_session_state_length(b.get(), &length)), "");
  EXPECT_EQ(length, 0);
  // Too long for the state: refused, naming the maximum.
  const int64_t too_long[4] = {1, 2, 65, 16};
  std::vector<float> big(2 * 65 * 16);
  EXPECT_EQ(take(cuvil_session_write_state(b.get(), "past_key_0", 1, 4, too_long, big.data(), big.size() * 4)),
            "5: state 'past_key_0': dim 2 is 65, outside [0, 64] (the compiled maximum [1, 2, 64, 16])");
  ASSERT_EQ(write_states(m.get(), b.get(), dims, saved), "");
  ASSERT_EQ(take(cuvil_session_state_length(b.get(), &length)), "");
  EXPECT_EQ(length, 8);
  const std::vector<int64_t> next = {argmax(la)};
  ASSERT_EQ(step(m.get(), a.get(), next, &la), "");
  ASSERT_EQ(step(m.get(), b.get(), next, &lb), "");
  EXPECT_EQ(la, lb);
}

std::atomic<int64_t> g_readings{0}, g_readings_limit{12};
int64_t jumping_clock() {  // past any deadline after a few readings: the run stops midway
  return g_readings.fetch_add(1) < g_readings_limit ? 0 : int64_t{1} << 50;
}

// The same decoder with its states copied (the attention fusion skipped: the presents are
// Concats that MatMuls read) and kept in place (the fused Attention appends), and gpt2_kv (in
// place), runtime/state_layout.h.
const std::pair<const char*, const char*> kLayouts[] = {
    {"gpt2_tiny_past", "--skip-pass=fuse-attention"}, {"gpt2_tiny_past", ""}, {"gpt2_kv", ""}};

// A run that fails (bad input, deadline, cancellation) leaves the cache as it was: the next
// successful run continues as if the failed one had never happened.
TEST(KvCache, FailedOrStoppedRunKeepsTheCache) {
  for (const auto& [model, extra] : kLayouts) {
    SCOPED_TRACE(std::string(model) + " " + extra);
    ModelPtr m = load(KvPackages::get().package(model, 64, extra));
    SessionPtr ref = session_of(m.get());
    SessionPtr s = session_of(m.get(), /*deadline_ms=*/1000);
    std::vector<float> lr, ls;
    ASSERT_EQ(step(m.get(), ref.get(), prompt(), &lr), "");
    ASSERT_EQ(step(m.get(), s.get(), prompt(), &ls), "");
    const std::vector<float> before = state_contents(s.get(), "past_value_1");
    // Bad input: an attention mask of the wrong length.
    const int64_t ids_dims[2] = {1, 1}, mask_dims[2] = {1, 3};
    const int64_t id = 5, mask[3] = {1, 1, 1};
    ASSERT_EQ(take(cuvil_session_set_input(s.get(), "input_ids", 7, 2, ids_dims, &id, 8)), "");
    ASSERT_EQ(take(cuvil_session_set_input(s.get(), "attention_mask", 7, 2, mask_dims, mask, 24)), "");
    EXPECT_NE(take(cuvil_session_run(s.get())), "");
    // Stopped midway by its deadline (the test clock jumps past it after a few checks).
    {
      g_readings = 0;
      rt::testing::ScopedRunClock clock(jumping_clock);
      const std::string e = step(m.get(), s.get(), {5}, nullptr);
      EXPECT_EQ(e.rfind(std::to_string(CUVIL_DEADLINE) + ": run exceeded its deadline", 0), 0u) << e;
    }
    int64_t length = 0;
    ASSERT_EQ(take(cuvil_session_state_length(s.get(), &length)), "");
    EXPECT_EQ(length, 8);
    EXPECT_EQ(state_contents(s.get(), "past_value_1"), before);
    ASSERT_EQ(step(m.get(), ref.get(), {5}, &lr), "");
    ASSERT_EQ(step(m.get(), s.get(), {5}, &ls), "");
    EXPECT_EQ(lr, ls);
    // Stopped at every depth of the run, before and after the attention appended rows (in
    // place, past the committed ones): still as it was.
    const std::vector<float> nine = state_contents(s.get(), "past_value_1");
    for (int64_t limit : {2, 6, 24, 48, 96, 192}) {
      g_readings = 0;
      g_readings_limit = limit;
      rt::testing::ScopedRunClock clock(jumping_clock);
      const std::string e = step(m.get(), s.get(), {6}, nullptr);
      if (e.empty()) break;  // the run finished before the limit: deeper ones would too
      EXPECT_EQ(e.rfind(std::to_string(CUVIL_DEADLINE) + ": run exceeded its deadline", 0), 0u) << e;
      ASSERT_EQ(take(cuvil_session_state_length(s.get(), &length)), "");
      EXPECT_EQ(length, 9) << limit;
      EXPECT_EQ(state_contents(s.get(), "past_value_1"), nine) << limit;
    }
    g_readings_limit = 12;
  }
}

// Cancelled from another thread: a cancel is tied to the run in progress, so one thread
// cancels continually while this one steps; each step that reports CUVIL_CANCELLED must have
// left the cache as it was before that step (a step that finished first moves it on).
TEST(KvCache, CancelledRunKeepsTheCache) {
  for (const auto& [model, extra] : kLayouts) {
    SCOPED_TRACE(std::string(model) + " " + extra);
    ModelPtr m = load(KvPackages::get().package(model, 64, extra));
    SessionPtr s = session_of(m.get());
    ASSERT_EQ(step(m.get(), s.get(), prompt(), nullptr), "");
    std::atomic<bool> done{false};
    std::thread canceller([&] {
      while (!done.load()) cuvil_status_free(cuvil_session_cancel(s.get()));
    });
    int cancelled = 0;
    for (int tries = 0; tries < 40 && cancelled < 3; ++tries) {
      int64_t before = 0, after = 0;
      ASSERT_EQ(take(cuvil_session_state_length(s.get(), &before)), "");
      const std::vector<float> was = state_contents(s.get(), "past_key_1");
      const std::string e = step(m.get(), s.get(), {7}, nullptr);
      ASSERT_EQ(take(cuvil_session_state_length(s.get(), &after)), "");
      if (e.empty()) {
        EXPECT_EQ(after, before + 1);
        continue;
      }
      EXPECT_EQ(e.rfind(std::to_string(CUVIL_CANCELLED) + ": ", 0), 0u) << e;
      ++cancelled;
      EXPECT_EQ(after, before);
      EXPECT_EQ(state_contents(s.get(), "past_key_1"), was);
    }
    done = true;
    canceller.join();
    if (cancelled == 0) std::cerr << model << ": no cancel landed inside a run in 40 steps\n";
  }
}

// A run that would grow the cache past the range of the past symbol fails, naming the
// symbol, its range and the length, and leaves the cache full but usable for reading.
TEST(KvCache, RunPastTheMaximumLengthIsAnError) {
  for (const auto& [model, extra] : kLayouts) {
    SCOPED_TRACE(std::string(model) + " " + extra);
    ModelPtr m = load(KvPackages::get().package(model, 10, extra));
    SessionPtr s = session_of(m.get());
    ASSERT_EQ(step(m.get(), s.get(), prompt(), nullptr), "");  // 8 rows
    ASSERT_EQ(step(m.get(), s.get(), {1}, nullptr), "");        // 9
    ASSERT_EQ(step(m.get(), s.get(), {2}, nullptr), "");        // 10
    EXPECT_EQ(step(m.get(), s.get(), {3}, nullptr),
              "5: state 'past_key_0': this run would leave 11 rows in the cache, past the range of 'past' [0, 10] "
              "(compile with a larger --dim past=0:N, or reset the state)");
    int64_t length = 0;
    ASSERT_EQ(take(cuvil_session_state_length(s.get(), &length)), "");
    EXPECT_EQ(length, 10);
    ASSERT_EQ(take(cuvil_session_reset_state(s.get())), "");
    EXPECT_EQ(step(m.get(), s.get(), prompt(), nullptr), "");
  }
}

// ---- in place (runtime/state_layout.h) ----

// The fused Attention appends to the state it reads: those states are in place, and the
// manifest and the compile report say so; without the fusion (the same model) the present is
// a Concat that also feeds MatMuls, and the states are copied, saying why.
TEST(KvCacheInPlace, LayoutIsDecidedFromTheProgramAndReported) {
  const std::string fused = manifest_of(KvPackages::get().package("gpt2_tiny_past"));
  EXPECT_NE(fused.find("state: past_key_0 f32[1, 4, 64, 32] length past axis 2 -> present_key_0; in place\n"),
            std::string::npos)
      << fused;
  EXPECT_NE(fused.find("state past_value_1: in place\n"), std::string::npos) << fused;
  // The decoders of export_decoders.py (masks filled with -1e9, the past length read by Shape)
  // fuse and append in place too.
  for (const char* model : {"gpt2_kv", "llama_kv"}) {
    const std::string text = manifest_of(KvPackages::get().package(model));
    EXPECT_NE(text.find("-> present_value_1; in place\n"), std::string::npos) << text;
  }
  const std::string unfused =
      manifest_of(KvPackages::get().package("gpt2_tiny_past", 64, "--skip-pass=fuse-attention"));
  EXPECT_NE(unfused.find("-> present_key_0; copied: 'present_key_0' is not made by a fused Attention from "
                         "'past_key_0' (a Concat the attention fusion did not absorb, or another op)\n"),
            std::string::npos)
      << unfused;
}

// In place and copied give ONNX Runtime's tokens; in place no kernel copies a committed row:
// the testing counter of past rows copied stays put over a whole greedy decode. (Without the
// fusion the Concat kernels copy the past, which that counter does not see; the positive
// control below shows that it counts the fused kernel's copies.)
TEST(KvCacheInPlace, GreedyTokensWithoutCopyingThePast) {
  const std::vector<int64_t> expected = reference_tokens("gpt2_tiny_past");
  for (const std::string extra : {"", "--skip-pass=fuse-attention"}) {
    SCOPED_TRACE(extra);
    ModelPtr m = load(KvPackages::get().package("gpt2_tiny_past", 64, extra));
    for (int threads : {1, 2}) {
      SessionPtr s = session_of(m.get(), 0, threads);
      const int64_t before = rt::testing::cache_bytes_copied();
      EXPECT_EQ(greedy(m.get(), s.get(), expected.size()), expected);
      if (extra.empty()) {
        EXPECT_EQ(rt::testing::cache_bytes_copied() - before, 0);
      }
    }
  }
  // Positive control: the pasts given by the caller (--kv-cache=off), the same fused kernel
  // copies them into the packed presents: 4 tensors of [1, 4, 2, 32] f32.
  ModelPtr off = load(KvPackages::get().package("gpt2_tiny_past", 64, "--kv-cache=off"));
  SessionPtr s = session_of(off.get());
  const std::vector<float> zeros(4 * 2 * 32, 0.0f);
  const int64_t past_dims[4] = {1, 4, 2, 32}, ids_dims[2] = {1, 1}, mask_dims[2] = {1, 3};
  const int64_t id = 3, mask[3] = {1, 1, 1};
  for (const char* name : {"past_key_0", "past_value_0", "past_key_1", "past_value_1"})
    ASSERT_EQ(take(cuvil_session_set_input(s.get(), name, 1, 4, past_dims, zeros.data(), zeros.size() * 4)), "");
  ASSERT_EQ(take(cuvil_session_set_input(s.get(), "input_ids", 7, 2, ids_dims, &id, 8)), "");
  ASSERT_EQ(take(cuvil_session_set_input(s.get(), "attention_mask", 7, 2, mask_dims, mask, 24)), "");
  const int64_t before = rt::testing::cache_bytes_copied();
  ASSERT_EQ(take(cuvil_session_run(s.get())), "");
  EXPECT_EQ(rt::testing::cache_bytes_copied() - before, 4 * 4 * 2 * 32 * 4);
}

// The present outputs of an in-place state read as packed tensors equal to the state, and
// read_state / reset / write_state continue the sequence exactly, in place as copied.
TEST(KvCacheInPlace, PresentOutputsAndStateCallsSeeThePackedCache) {
  ModelPtr m = load(KvPackages::get().package("gpt2_tiny_past"));
  SessionPtr a = session_of(m.get()), b = session_of(m.get());
  std::vector<float> la, lb;
  ASSERT_EQ(step(m.get(), a.get(), prompt(), &la), "");
  ASSERT_EQ(step(m.get(), a.get(), {3}, &la), "");
  ASSERT_EQ(step(m.get(), b.get(), prompt(), &lb), "");
  ASSERT_EQ(step(m.get(), b.get(), {3}, &lb), "");
  const std::vector<float> key1 = state_contents(b.get(), "past_key_1");
  ASSERT_EQ(key1.size(), 4u * 9 * 32);
  // present_key_1 is output 3 (logits, present_key_0, present_value_0, present_key_1, ...).
  size_t present_index = 0;
  for (size_t i = 0; i < cuvil_model_output_count(m.get()); ++i) {
    cuvil_tensor_info info;
    cuvil_model_output_info(m.get(), i, &info);
    if (std::string(info.name) == "present_key_1") present_index = i;
  }
  ASSERT_NE(present_index, 0u);
  cuvil_tensor_info info;
  const void* data = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(take(cuvil_session_get_output(b.get(), present_index, &info, &data, &bytes)), "");
  EXPECT_STREQ(info.shape, "[1, 4, 9, 32]");
  ASSERT_EQ(bytes, key1.size() * 4);
  EXPECT_EQ(std::memcmp(data, key1.data(), bytes), 0);
  // Save, reset, write back: the next step equals the uninterrupted session's.
  std::vector<std::vector<float>> saved;
  std::vector<std::vector<int64_t>> dims;
  for (size_t i = 0; i < 4; ++i) {
    cuvil_state_info si;
    ASSERT_EQ(take(cuvil_model_state_info(m.get(), i, &si)), "");
    saved.push_back(state_contents(b.get(), si.name));
    dims.push_back({1, 4, 9, 32});
  }
  ASSERT_EQ(take(cuvil_session_reset_state(b.get())), "");
  ASSERT_EQ(write_states(m.get(), b.get(), dims, saved), "");
  // The last run's present output is still what the run left.
  ASSERT_EQ(take(cuvil_session_get_output(b.get(), present_index, &info, &data, &bytes)), "");
  EXPECT_EQ(std::memcmp(data, key1.data(), bytes), 0);
  EXPECT_EQ(state_contents(b.get(), "past_key_1"), key1);
  ASSERT_EQ(step(m.get(), a.get(), {argmax(la)}, &la), "");
  ASSERT_EQ(step(m.get(), b.get(), {argmax(lb)}, &lb), "");
  EXPECT_EQ(la, lb);
}

// Batch 2, in place: each sequence of the batch decodes as it does alone (the state's blocks of
// rows are `max` rows apart per batch and head).
TEST(KvCacheInPlace, BatchOfTwoDecodesEachSequenceAsAlone) {
  const std::string path = KvPackages::get().package("gpt2_tiny_past", 16, "--dim=batch=1:2");
  EXPECT_NE(manifest_of(path).find("-> present_key_0; in place"), std::string::npos);
  ModelPtr m = load(path);
  SessionPtr pair = session_of(m.get());
  std::vector<int64_t> first = prompt(), second = prompt();
  std::reverse(second.begin(), second.end());
  std::vector<float> alone[2];
  for (int which = 0; which < 2; ++which) {
    SessionPtr s = session_of(m.get());
    ASSERT_EQ(step(m.get(), s.get(), which ? second : first, nullptr), "");
    ASSERT_EQ(step(m.get(), s.get(), {7}, &alone[which]), "");
    ASSERT_EQ(step(m.get(), s.get(), {9}, &alone[which]), "");
  }
  // Both sequences at once: [2, seq] ids, a [2, total] mask of ones.
  auto run2 = [&](const std::vector<int64_t>& ids, int64_t seq, std::vector<float>* logits) {
    int64_t length = 0;
    ASSERT_EQ(take(cuvil_session_state_length(pair.get(), &length)), "");
    const int64_t ids_dims[2] = {2, seq}, mask_dims[2] = {2, length + seq};
    const std::vector<int64_t> mask(static_cast<size_t>(2 * (length + seq)), 1);
    ASSERT_EQ(take(cuvil_session_set_input(pair.get(), "input_ids", 7, 2, ids_dims, ids.data(), ids.size() * 8)), "");
    ASSERT_EQ(take(cuvil_session_set_input(pair.get(), "attention_mask", 7, 2, mask_dims, mask.data(),
                                           mask.size() * 8)),
              "");
    ASSERT_EQ(take(cuvil_session_run(pair.get())), "");
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(take(cuvil_session_get_output(pair.get(), 0, &info, &data, &bytes)), "");
    const float* all = static_cast<const float*>(data);
    logits->assign(all, all + bytes / 4);
  };
  std::vector<int64_t> ids = first;
  ids.insert(ids.end(), second.begin(), second.end());
  std::vector<float> logits;
  run2(ids, static_cast<int64_t>(first.size()), &logits);
  run2({7, 7}, 1, &logits);
  run2({9, 9}, 1, &logits);
  const size_t vocab = alone[0].size();
  ASSERT_EQ(logits.size(), 2 * vocab);
  for (int which = 0; which < 2; ++which)
    for (size_t j = 0; j < vocab; ++j)
      EXPECT_NEAR(logits[which * vocab + j], alone[which][j], 1e-4f * (1.0f + std::abs(alone[which][j])))
          << "sequence " << which << " logit " << j;
}

// ---- the STATE section ----

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(KvCachePackage, StateSectionRoundTrips) {
  std::shared_ptr<rt::LoadedPackage> pkg;
  ASSERT_TRUE(rt::LoadedPackage::open_file(KvPackages::get().package("llama_kv"), &pkg).is_ok());
  const std::vector<rt::StateRecord>& states = pkg->states();
  ASSERT_EQ(states.size(), 4u);
  EXPECT_EQ(states[3].name, "past_value_1");
  EXPECT_EQ(pkg->program().tensors[pkg->program().inputs[states[3].input]].name, "past_value_1");
  EXPECT_EQ(pkg->program().tensors[pkg->program().outputs[states[3].output]].name, "present_value_1");
  EXPECT_EQ(pkg->program().symbols[states[3].symbol].name, "past");
  EXPECT_EQ(states[3].max_dims, (std::vector<int64_t>{1, 2, 64, 16}));
  // Written again from what was read: the same bytes.
  rt::PackageContents c;
  c.manifest = pkg->manifest().text;
  c.programs.push_back({pkg->program(), {}});
  c.weights.assign(pkg->weights(), pkg->weights() + pkg->weights_size());
  c.states = states;
  const std::vector<uint8_t> bytes = rt::write_package(c);
  std::shared_ptr<rt::LoadedPackage> again;
  ASSERT_TRUE(rt::LoadedPackage::open_memory(bytes.data(), bytes.size(), true, &again).is_ok());
  ASSERT_EQ(again->states().size(), 4u);
  EXPECT_EQ(again->states()[2].max_dims, states[2].max_dims);
  EXPECT_EQ(again->states()[2].axis, 2u);
  // --kv-cache off: no STATE, the pasts are the caller's inputs again.
  ModelPtr off = load(KvPackages::get().package("llama_kv", 64, "--kv-cache=off"));
  EXPECT_EQ(cuvil_model_state_count(off.get()), 0u);
}

// Section entry fields (docs/format.md) and re-sealing after an edit.
uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint64_t get64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
// The STATE section's offset, with its table entry's position in *entry.
size_t state_offset(const std::vector<uint8_t>& b, size_t* entry) {
  const uint32_t n = get32(b, 16), header = get32(b, 20);
  for (uint32_t i = 0; i < n; ++i) {
    const size_t at = header + 32 * i;
    if (get32(b, at) == static_cast<uint32_t>(rt::SectionKind::STATE)) {
      *entry = at;
      return static_cast<size_t>(get64(b, at + 8));
    }
  }
  ADD_FAILURE() << "no STATE section";
  return 0;
}
std::string load_edited(std::vector<uint8_t> b, size_t entry) {
  const uint64_t off = get64(b, entry + 8), size = get64(b, entry + 16);
  put32(b, entry + 28, rt::crc32c(b.data() + off, size));
  std::shared_ptr<rt::LoadedPackage> pkg;
  return rt::LoadedPackage::open_memory(b.data(), b.size(), true, &pkg).message();
}

// A malformed STATE record is refused at load, naming the record and what is wrong.
TEST(BadPackage, MalformedStateRecord) {
  const std::vector<uint8_t> good = read_all(KvPackages::get().package("gpt2_kv"));
  size_t entry = 0;
  const size_t at = state_offset(good, &entry);
  // Record 0 starts after the count: input, output, axis, symbol, dtype, rank, dims...
  std::vector<uint8_t> b = good;
  put32(b, at + 4 + 8, 1);  // axis 1: the heads dim, a constant
  EXPECT_EQ(load_edited(b, entry), "STATE section: record 0 ('past_key_0'): dim 1 of the input is 4, not the length "
                                   "symbol 'past'");
  b = good;
  put32(b, at + 4 + 4, 999);  // output out of range
  EXPECT_EQ(load_edited(b, entry), "STATE section: record 0: output 999 out of range (5 outputs)");
  b = good;
  put32(b, at + 4 + 16, 6);  // dtype i32
  EXPECT_EQ(load_edited(b, entry),
            "STATE section: record 0 ('past_key_0'): dtype 6 differs from its input's and output's");
  b = good;
  const size_t max_past = at + 4 + 24 + 8 * 2;
  std::memcpy(b.data() + max_past, "\x20\0\0\0\0\0\0\0", 8);  // maximum 32, the range says 64
  EXPECT_EQ(load_edited(b, entry), "STATE section: record 0 ('past_key_0'): length symbol 'past' has range [0, 64] "
                                   "but the record's maximum is 32");
  b = good;
  put32(b, at, 9);  // more records than inputs
  EXPECT_EQ(load_edited(b, entry), "STATE section: 9 records for 6 inputs");
  b = good;
  const size_t record1 = at + 4 + 24 + 4 * 8 + 4 + std::strlen("past_key_0");
  put32(b, record1, get32(good, at + 4));  // record 1 takes record 0's input
  EXPECT_EQ(load_edited(b, entry), "STATE section: record 1: input 2 is already another record's");
}

// ---- cuvil-run --generate ----

TEST(CliGenerate, TokensEqualOnnxRuntimesLoop) {
  for (const std::string model : {"gpt2_kv", "llama_kv"}) {
    SCOPED_TRACE(model);
    const std::string pkg = KvPackages::get().package(model);
    for (const char* threads : {"1", "2"}) {
      const RunResult r = test::run_tool(KvPackages::get().dir(), CUVIL_RUN,
                                         {pkg, "--generate", "16", "--input", "input_ids=" + kKv + "prompt.npy",
                                          "--threads", threads});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::string expected = "tokens:";
      for (int64_t t : reference_tokens(model)) expected += " " + std::to_string(t);
      EXPECT_EQ(r.out.substr(0, r.out.find('\n')), expected);
      EXPECT_NE(r.out.find("\ndecode: 16 tokens, "), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(" tokens/s, first token "), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("\nprefill again: "), std::string::npos) << r.out;
    }
  }
}

TEST(CliGenerate, ClearErrors) {
  TempDir tmp;
  // A package without state.
  const std::string plain = tmp.file("plain.cuvir");
  RunResult c = test::run_tool(tmp.path(), CUVIL_CUVILC,
                               {"compile", kKv + "gpt2_kv.onnx", "--dim", "batch=1", "--kv-cache", "off", "-o", plain});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult r = test::run_tool(tmp.path(), CUVIL_RUN,
                               {plain, "--generate", "4", "--input", "input_ids=" + kKv + "prompt.npy"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cuvil-run: error: --generate: the package has no state (KV cache)"), std::string::npos)
      << r.err;
  // No prompt.
  r = test::run_tool(tmp.path(), CUVIL_RUN, {KvPackages::get().package("gpt2_kv"), "--generate", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--generate: give the prompt as --input input_ids=prompt.npy"), std::string::npos) << r.err;
  // A prompt longer than the cache can hold.
  r = test::run_tool(tmp.path(), CUVIL_RUN,
                     {KvPackages::get().package("gpt2_kv", 10), "--generate", "8", "--input",
                      "input_ids=" + kKv + "prompt.npy"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("past the range of 'past' [0, 10]"), std::string::npos) << r.err;
  // auto: a compile that finds pairs but cannot keep them says why on stderr.
  c = test::run_tool(tmp.path(), CUVIL_CUVILC, {"compile", kKv + "gpt2_kv.onnx", "--dim", "batch=1", "-o", plain});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("cuvilc: note: KV cache not kept as state: the state 'past_key_0' is sized by the range of "
                       "'past' (dim 2), which is 0: with no upper bound; give --dim past=0:N"),
            std::string::npos)
      << c.err;
  c = test::run_tool(tmp.path(), CUVIL_CUVILC,
                     {"compile", kKv + "gpt2_kv.onnx", "--dim", "batch=1", "--dim", "past=0:8", "-o", plain});
  EXPECT_NE(c.err.find("; KV cache: 4 state tensors; arena "), std::string::npos) << c.err;
  // A prompt that is not int64 [batch, seq].
  tools::HostTensor floats;
  floats.dtype = 1;
  floats.dims = {1, 2};
  floats.bytes.assign(8, 0);
  ASSERT_EQ(tools::write_npy(tmp.file("floats.npy"), floats), "");
  r = test::run_tool(tmp.path(), CUVIL_RUN,
                     {KvPackages::get().package("gpt2_kv"), "--generate", "2", "--input",
                      "input_ids=" + tmp.file("floats.npy")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--generate: input_ids must be i64 [batch, seq] with seq >= 1 (the prompt)"), std::string::npos)
      << r.err;
  // --kv-cache on without a bounded past: a usage error naming the option.
  c = test::run_tool(tmp.path(), CUVIL_CUVILC,
                     {"compile", kKv + "gpt2_kv.onnx", "--dim", "batch=1", "--kv-cache", "on", "-o", plain});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.err.find("--kv-cache on: the state 'past_key_0' is sized by the range of 'past'"), std::string::npos)
      << c.err;
}

// Without --generate, cuvil-run needs no value for the state inputs.
TEST(CliGenerate, PlainRunBindsTheStateItself) {
  const RunResult r = test::run_tool(KvPackages::get().dir(), CUVIL_RUN,
                                     {KvPackages::get().package("gpt2_kv"), "--input", "input_ids=" + kKv + "prompt.npy",
                                      "--shape", "attention_mask=1x8"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("present_key_0: f32[1, 4, 8, 16]"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cuvil
