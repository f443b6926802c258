// A streaming voice-activity model with a sample-rate If and LSTM state, scripted by torch 1.13
// the way Silero VAD is published (testdata/scripts/export_vad.py), compiled with the real
// cuvilc with and without --freeze, run over a stream of 10 chunks per rate with the state
// fed back from each run to the next, and compared with ONNX Runtime's outputs for the same
// stream (testdata/models/vad/). Suite VadStream; also --freeze's diagnostics (suite Freeze).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cli/npy.h"
#include "npy_test_util.h"
#include "run_tool.h"
#include "runtime/include/cuvil.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::TempDir;
using test::run_tool;

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" << (text)

// ONNX TensorProto data types, as cuvil_dtype takes them.
constexpr cuvil_dtype kF32 = 1, kI64 = 7;

const std::string kModels = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/";
const std::string kVad = kModels + "vad_stream.onnx";

std::string take(cuvil_status s) {
  std::string m = s ? cuvil_status_message(s) : "";
  if (s && m.empty()) m = "error";
  cuvil_status_free(s);
  return m;
}

struct ModelDeleter {
  void operator()(cuvil_model* m) const { cuvil_model_release(m); }
};
struct SessionDeleter {
  void operator()(cuvil_session* s) const { cuvil_session_release(s); }
};

tools::HostTensor npy(const std::string& path) {
  tools::HostTensor t;
  const std::string err = tools::read_npy(path, &t);
  EXPECT_EQ(err, "");
  return t;
}

// Element block `i` of a tensor stacked along axis 0, with its dims.
std::vector<float> slice(const tools::HostTensor& t, int64_t i, std::vector<int64_t>* dims) {
  dims->assign(t.dims.begin() + 1, t.dims.end());
  size_t n = 1;
  for (int64_t d : *dims) n *= static_cast<size_t>(d);
  const float* p = reinterpret_cast<const float*>(t.bytes.data()) + static_cast<size_t>(i) * n;
  return std::vector<float>(p, p + n);
}

std::string compile(const TempDir& tmp, const std::string& name, const std::vector<std::string>& extra) {
  const std::string pkg = tmp.file(name);
  std::vector<std::string> args = {"compile", kVad, "-o", pkg};
  args.insert(args.end(), extra.begin(), extra.end());
  const RunResult r = run_tool(tmp.path(), CUVIL_CUVILC, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return pkg;
}

std::vector<std::string> input_names(cuvil_model* m) {
  std::vector<std::string> names;
  for (size_t i = 0; i < cuvil_model_input_count(m); ++i) {
    cuvil_tensor_info info;
    EXPECT_EQ(take(cuvil_model_input_info(m, i, &info)), "");
    names.push_back(info.name);
  }
  return names;
}

// Runs the stream of `sr` through `pkg` (which takes `sr` as an input unless frozen), feeding
// the state back, and compares every chunk's probability and new state with ONNX Runtime's.
void expect_stream_matches(const std::string& pkg, int64_t sr, bool sr_is_input) {
  const std::string prefix = kModels + "vad/" + std::to_string(sr) + "_";
  const tools::HostTensor chunks = npy(prefix + "chunks.npy"), probs = npy(prefix + "probs.npy"),
                          states = npy(prefix + "states.npy");
  ASSERT_EQ(chunks.dims.size(), 3u);
  cuvil_model* raw_model = nullptr;
  ASSERT_EQ(take(cuvil_model_load_file(pkg.c_str(), &raw_model)), "");
  std::unique_ptr<cuvil_model, ModelDeleter> model(raw_model);
  EXPECT_EQ(input_names(model.get()), sr_is_input ? std::vector<std::string>({"input", "state", "sr"})
                                                  : std::vector<std::string>({"input", "state"}));
  cuvil_session_options o;
  cuvil_session_options_init(&o);
  o.threads = 2;
  cuvil_session* raw_session = nullptr;
  ASSERT_EQ(take(cuvil_session_create(model.get(), &o, &raw_session)), "");
  std::unique_ptr<cuvil_session, SessionDeleter> s(raw_session);
  const int64_t batch = chunks.dims[1];
  std::vector<int64_t> state_dims = {2, batch, 128};
  std::vector<float> state(static_cast<size_t>(2 * batch * 128), 0.f);
  for (int64_t i = 0; i < chunks.dims[0]; ++i) {
    std::vector<int64_t> chunk_dims, prob_dims, want_state_dims;
    const std::vector<float> chunk = slice(chunks, i, &chunk_dims);
    const std::vector<float> want_prob = slice(probs, i, &prob_dims);
    const std::vector<float> want_state = slice(states, i, &want_state_dims);
    ASSERT_EQ(take(cuvil_session_set_input(s.get(), "input", kF32, 2, chunk_dims.data(), chunk.data(),
                                           chunk.size() * 4)), "");
    ASSERT_EQ(take(cuvil_session_set_input(s.get(), "state", kF32, 3, state_dims.data(), state.data(),
                                           state.size() * 4)), "");
    if (sr_is_input) {
      ASSERT_EQ(take(cuvil_session_set_input(s.get(), "sr", kI64, 0, nullptr, &sr, 8)), "");
    }
    ASSERT_EQ(take(cuvil_session_run(s.get())), "") << "chunk " << i;
    for (size_t k = 0; k < 2; ++k) {
      cuvil_tensor_info info;
      const void* data = nullptr;
      size_t bytes = 0;
      ASSERT_EQ(take(cuvil_session_get_output(s.get(), k, &info, &data, &bytes)), "");
      const std::vector<float>& want = k == 0 ? want_prob : want_state;
      ASSERT_EQ(bytes, want.size() * 4) << "output " << k << " chunk " << i;
      const float* got = static_cast<const float*>(data);
      for (size_t e = 0; e < want.size(); ++e)
        ASSERT_NEAR(got[e], want[e], 1e-5f + 1e-4f * std::fabs(want[e]))
            << "sr " << sr << " chunk " << i << " output " << k << " element " << e;
      if (k == 1) state.assign(got, got + want.size());  // fed back: the next chunk's state
    }
  }
}

// Without --freeze the If stays: one package serves both rates, the frame count of the
// branch taken bound at run time.
TEST(VadStream, WithoutFreezeMatchesOnnxRuntimeAtBothRates) {
  TempDir tmp;
  const std::string pkg = compile(tmp, "vad.cuvir", {});
  expect_stream_matches(pkg, 16000, true);
  expect_stream_matches(pkg, 8000, true);
}

// --freeze sr=16000 (command line) and freeze: {sr: 8000} (config): the If folds to one
// branch and sr leaves the inputs.
TEST(VadStream, FrozenSampleRateMatchesOnnxRuntime) {
  TempDir tmp;
  expect_stream_matches(compile(tmp, "vad16k.cuvir", {"--freeze", "sr=16000"}), 16000, false);
  test::write_bytes(tmp.file("vad8k.yaml"), "freeze:\n  sr: 8000\n");
  expect_stream_matches(compile(tmp, "vad8k.cuvir", {"--config", tmp.file("vad8k.yaml")}), 8000, false);
  test::write_bytes(tmp.file("sr.npy"), test::npy_file("<i8", {}, test::raw(std::vector<int64_t>{8000})));
  expect_stream_matches(compile(tmp, "vad8k_npy.cuvir", {"--freeze", "sr=" + tmp.file("sr.npy")}), 8000, false);
  const RunResult ir = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", kVad, "--freeze", "sr=16000", "--emit", "ir"});
  ASSERT_EQ(ir.exit_code, 0) << ir.err;
  EXPECT_EQ(ir.out.find("= If<"), std::string::npos) << ir.out;
  EXPECT_EQ(ir.out.find("enc8"), std::string::npos) << "the 8 kHz branch is gone:\n" << ir.out;
}

RunResult freeze_fails(const TempDir& tmp, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"compile", kVad, "-o", tmp.file("never.cuvir")};
  args.insert(args.end(), extra.begin(), extra.end());
  RunResult r = run_tool(tmp.path(), CUVIL_CUVILC, args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(::access(tmp.file("never.cuvir").c_str(), F_OK), 0) << "nothing is written on failure";
  return r;
}

TEST(Freeze, UnknownInputIsRefusedWithTheInputs) {
  TempDir tmp;
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "rate=16000"}).err,
                  "--freeze rate: the model has no input 'rate' (inputs: input, state, sr)");
  test::write_bytes(tmp.file("c.yaml"), "freeze:\n  rate: 16000\n");
  EXPECT_MENTIONS(freeze_fails(tmp, {"--config", tmp.file("c.yaml")}).err, "c.yaml:2:9: freeze.rate: the model has no input 'rate'");
}

TEST(Freeze, ValueThatDoesNotFitTheInputIsRefused) {
  TempDir tmp;
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "sr=16k"}).err, "input 'sr' is i64[]; '16k' is not an integer");
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "sr"}).err, "--freeze 'sr': expected NAME=VALUE or NAME=FILE.npy");
  // A number freezes one element only; state's batch dim is symbolic.
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "state=0"}).err, "is not fixed: fix it with --dim batch=N");
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "state=0", "--dim", "batch=1"}).err,
                  "a number freezes an input of one element only: give a .npy file");
  test::write_bytes(tmp.file("f32.npy"), test::npy_file("<f4", {}, test::raw(std::vector<float>{16000})));
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "sr=" + tmp.file("f32.npy")}).err, "holds f32 []");
  test::write_bytes(tmp.file("two.npy"), test::npy_file("<i8", {2}, test::raw(std::vector<int64_t>{1, 2})));
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "sr=" + tmp.file("two.npy")}).err, "has shape [2]");
  test::write_bytes(tmp.file("bad.npy"), "not a numpy file");
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "sr=" + tmp.file("bad.npy")}).err, "--freeze sr: input 'sr': ");
  EXPECT_MENTIONS(freeze_fails(tmp, {"--freeze", "sr=" + tmp.file("missing.npy")}).err, "missing.npy");
  test::write_bytes(tmp.file("list.yaml"), "freeze:\n  sr: [1, 2]\n");
  EXPECT_MENTIONS(freeze_fails(tmp, {"--config", tmp.file("list.yaml")}).err,
                  "freeze.sr: expected a number, true, false or a .npy file, got a list");
}

}  // namespace
}  // namespace cuvil
