// Whole exported models against ONNX Runtime (suite ModelReferences): each test model in
// testdata/models/ is compiled with the real cuvilc, run with the real cuvil-run on the inputs
// stored in testdata/models/refs/<model>/, and its outputs are compared with the outputs ONNX
// Runtime computed for the same inputs (stored beside them by
// testdata/scripts/make_references.py, ORT with graph optimisations off: an independent
// reference, not cuvil's own earlier output). Each model is checked twice: as compiled by
// default, and with every rewriting pass skipped (kRewritePasses), so a rewrite that changes
// what a model computes fails here even when the unrewritten model is right, and the other way
// round.
//
// The .npy files are read with a small codec of this file's own (format 1.0, little-endian,
// C order), independent of cli/npy.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "onnx_builder.h"
#include "rewrite_passes.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::run_tool;
using test::TempDir;

// "Without rewrites" compiles with `--skip-pass` for each rewriting pass (tests/rewrite_passes.h).
const std::set<std::string>& kRewritePasses = test::rewrite_passes();

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-4;

// The models with references: graph input and output names, each a refs/<model>/<name>.npy.
struct ModelRefs {
  const char* model;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};

const ModelRefs kModels[] = {
    {"bert_tiny", {"input_ids", "attention_mask", "token_type_ids"}, {"last_hidden_state", "pooler_output"}},
    {"bert_tiny_opset14", {"input_ids", "attention_mask", "token_type_ids"}, {"last_hidden_state", "pooler_output"}},
    {"bert_tiny_opset17", {"input_ids", "attention_mask", "token_type_ids"}, {"last_hidden_state", "pooler_output"}},
    {"gpt2_tiny", {"input_ids", "attention_mask"}, {"logits"}},
    {"gpt2_tiny_past",
     {"input_ids", "attention_mask", "past_key_0", "past_value_0", "past_key_1", "past_value_1"},
     {"logits", "present_key_0", "present_value_0", "present_key_1", "present_value_1"}},
    {"llama_tiny", {"input_ids"}, {"logits"}},
    {"resnet18", {"input"}, {"logits"}},
    {"mobilenet_v2_tiny", {"input"}, {"logits"}},
};

const ModelRefs& refs_of(const std::string& model) {
  for (const ModelRefs& m : kModels)
    if (model == m.model) return m;
  ADD_FAILURE() << "no row for " << model << " in kModels";
  return kModels[0];
}

// ---- .npy (format 1.0/2.0, little-endian, C order) ----

struct Npy {
  std::string descr;           // "<f4", "<i8", ...
  std::vector<int64_t> shape;
  std::string data;
  std::string error;           // non-empty: the file could not be read
};

// The value of `key` in the header dict, up to the next ',' (or the matching ')' for shape).
std::string header_field(const std::string& header, const std::string& key) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) return "";
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) return "";
  size_t end = header[start] == '(' ? header.find(')', start) + 1 : header.find(',', start);
  return header.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

Npy read_npy(const std::string& path) {
  Npy n;
  const std::string f = test::read_bytes(path);
  if (f.size() < 10 || f.compare(0, 6, "\x93NUMPY") != 0) {
    n.error = path + ": not a .npy file";
    return n;
  }
  const bool v1 = f[6] == 1;
  const size_t len_bytes = v1 ? 2 : 4;
  size_t len = 0;
  for (size_t i = 0; i < len_bytes; ++i) len |= static_cast<size_t>(static_cast<uint8_t>(f[8 + i])) << (8 * i);
  const size_t data_at = 8 + len_bytes + len;
  if (data_at > f.size()) {
    n.error = path + ": truncated header";
    return n;
  }
  const std::string header = f.substr(8 + len_bytes, len);
  n.descr = header_field(header, "descr");
  if (n.descr.size() >= 2) n.descr = n.descr.substr(1, n.descr.size() - 2);  // drop the quotes
  if (header_field(header, "fortran_order") != "False") n.error = path + ": not C order";
  std::string shape = header_field(header, "shape");
  for (size_t i = 0; i < shape.size();) {
    if (shape[i] >= '0' && shape[i] <= '9') {
      size_t j = i;
      while (j < shape.size() && shape[j] >= '0' && shape[j] <= '9') ++j;
      n.shape.push_back(std::stoll(shape.substr(i, j - i)));
      i = j;
    } else {
      ++i;
    }
  }
  n.data = f.substr(data_at);
  return n;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Compares float32 output `got` with `want` elementwise (|got - want| <= atol + rtol * |want|,
// NaN never passes); on failure the message names the output, the number of bad elements and
// the worst one (flat index, multi-index, both values).
::testing::AssertionResult close_to(const std::string& name, const Npy& got, const Npy& want) {
  if (!got.error.empty()) return ::testing::AssertionFailure() << got.error;
  if (!want.error.empty()) return ::testing::AssertionFailure() << want.error;
  if (want.descr != "<f4")
    return ::testing::AssertionFailure() << name << ": reference is " << want.descr << ", not <f4";
  if (got.descr != want.descr || got.shape != want.shape)
    return ::testing::AssertionFailure() << name << ": got " << got.descr << " " << shape_text(got.shape)
                                         << ", want " << want.descr << " " << shape_text(want.shape);
  if (got.data.size() != want.data.size())
    return ::testing::AssertionFailure() << name << ": " << got.data.size() << " data bytes, want " << want.data.size();
  const size_t count = want.data.size() / 4;
  std::vector<float> g(count), w(count);
  std::memcpy(g.data(), got.data.data(), count * 4);
  std::memcpy(w.data(), want.data.data(), count * 4);
  size_t bad = 0, worst = 0;
  double worst_excess = -1;  // how far past its tolerance the worst element is, in tolerances
  for (size_t i = 0; i < count; ++i) {
    const double tol = kAtol + kRtol * std::fabs(w[i]);
    const double diff = std::fabs(static_cast<double>(g[i]) - w[i]);
    const double excess = std::isnan(diff) ? INFINITY : diff / tol;
    if (!(diff <= tol)) ++bad;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::vector<int64_t> index(want.shape.size());
  size_t rest = worst;
  for (size_t d = want.shape.size(); d-- > 0;) {
    index[d] = want.shape[d] ? static_cast<int64_t>(rest % want.shape[d]) : 0;
    rest = want.shape[d] ? rest / want.shape[d] : 0;
  }
  return ::testing::AssertionFailure()
         << name << ": " << bad << " of " << count << " elements differ from ONNX Runtime by more than "
         << "atol " << kAtol << " + rtol " << kRtol << " * |want|; worst at " << shape_text(index) << " (flat "
         << worst << "): got " << g[worst] << ", want " << w[worst] << " (diff "
         << std::fabs(static_cast<double>(g[worst]) - w[worst]) << ")";
}

// Compiles the model (with `extra` compile options), runs it on its stored inputs and compares
// every output with ONNX Runtime's; prints how long compile and run took.
void check_model(const std::string& model, const std::vector<std::string>& extra, const std::string& variant) {
  const ModelRefs& m = refs_of(model);
  const std::string models = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/";
  const std::string refs = models + "refs/" + model + "/";
  TempDir tmp;
  const std::string pkg = tmp.file(model + ".cuvir");
  std::vector<std::string> args = {"compile", models + model + ".onnx", "-o", pkg};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto t0 = std::chrono::steady_clock::now();
  RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, args);
  ASSERT_EQ(c.exit_code, 0) << model << " (" << variant << ") did not compile:\n" << c.err;
  const auto t1 = std::chrono::steady_clock::now();

  const std::string out_dir = tmp.file("out");
  std::vector<std::string> run_args = {pkg, "--output-dir", out_dir};
  for (const std::string& in : m.inputs) {
    run_args.push_back("--input");
    run_args.push_back(in + "=" + refs + in + ".npy");
  }
  RunResult r = run_tool(tmp.path(), CUVIL_RUN, run_args);
  ASSERT_EQ(r.exit_code, 0) << model << " (" << variant << ") did not run:\n" << r.err;
  const auto t2 = std::chrono::steady_clock::now();
  for (const std::string& out : m.outputs)
    EXPECT_TRUE(close_to(out, read_npy(out_dir + "/" + out + ".npy"), read_npy(refs + out + ".npy")))
        << model << " (" << variant << ")";
  auto ms = [](auto a, auto b) { return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count(); };
  std::printf("[ timing   ] %s (%s): compile %lld ms, run %lld ms\n", model.c_str(), variant.c_str(),
              static_cast<long long>(ms(t0, t1)), static_cast<long long>(ms(t1, t2)));
}

void check_default(const std::string& model) { check_model(model, {}, "default passes"); }

void check_without_rewrites(const std::string& model) {
  std::vector<std::string> skip;
  for (const std::string& p : kRewritePasses) {
    skip.push_back("--skip-pass");
    skip.push_back(p);
  }
  check_model(model, skip, "rewriting passes skipped");
}

TEST(ModelReferences, BertTiny) { check_default("bert_tiny"); }
TEST(ModelReferences, BertTinyWithoutRewrites) { check_without_rewrites("bert_tiny"); }
TEST(ModelReferences, BertTinyOpset17) { check_default("bert_tiny_opset17"); }
TEST(ModelReferences, BertTinyOpset17WithoutRewrites) { check_without_rewrites("bert_tiny_opset17"); }
TEST(ModelReferences, Gpt2Tiny) { check_default("gpt2_tiny"); }
TEST(ModelReferences, Gpt2TinyWithoutRewrites) { check_without_rewrites("gpt2_tiny"); }
TEST(ModelReferences, Gpt2TinyPast) { check_default("gpt2_tiny_past"); }
TEST(ModelReferences, Gpt2TinyPastWithoutRewrites) { check_without_rewrites("gpt2_tiny_past"); }
TEST(ModelReferences, LlamaTiny) { check_default("llama_tiny"); }
TEST(ModelReferences, LlamaTinyWithoutRewrites) { check_without_rewrites("llama_tiny"); }
TEST(ModelReferences, Resnet18) { check_default("resnet18"); }
TEST(ModelReferences, Resnet18WithoutRewrites) { check_without_rewrites("resnet18"); }
TEST(ModelReferences, MobilenetV2Tiny) { check_default("mobilenet_v2_tiny"); }
TEST(ModelReferences, MobilenetV2TinyWithoutRewrites) { check_without_rewrites("mobilenet_v2_tiny"); }
// The convolution chains channels-last (passes/choose_layout.h): the same references as the
// NCHW compile above, so NHWC and NCHW agree with each other within twice the tolerance.
TEST(ModelReferences, Resnet18Nhwc) { check_model("resnet18", {"--layout", "nhwc"}, "layout nhwc"); }
TEST(ModelReferences, Resnet18LayoutAuto) { check_model("resnet18", {"--layout", "auto"}, "layout auto"); }
TEST(ModelReferences, MobilenetV2TinyNhwc) { check_model("mobilenet_v2_tiny", {"--layout", "nhwc"}, "layout nhwc"); }

// Without tile kernels (--no-fusion): every Slice, position Gather, Range and mask reshape runs
// as its whole-tensor kernel, so the strided loads and reshaped loads of the default compile
// (codegen/strided_loads.h) are checked against the same references from the other side.
TEST(ModelReferences, BertTinyNoFusion) { check_model("bert_tiny", {"--no-fusion"}, "no fusion"); }
TEST(ModelReferences, Gpt2TinyNoFusion) { check_model("gpt2_tiny", {"--no-fusion"}, "no fusion"); }
TEST(ModelReferences, Gpt2TinyPastNoFusion) { check_model("gpt2_tiny_past", {"--no-fusion"}, "no fusion"); }
TEST(ModelReferences, LlamaTinyNoFusion) { check_model("llama_tiny", {"--no-fusion"}, "no fusion"); }

// Every model in the table has a test above, and every stored reference is used: a model added
// to make_references.py without a row here (or the other way round) fails.
TEST(ModelReferences, TableCoversTheStoredReferences) {
  const std::string refs = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/refs/";
  std::set<std::string> table;
  for (const ModelRefs& m : kModels) {
    table.insert(m.model);
    std::set<std::string> files;
    for (const std::string& n : m.inputs) files.insert(n + ".npy");
    for (const std::string& n : m.outputs) files.insert(n + ".npy");
    EXPECT_EQ(test::list_dir(refs + m.model), files) << m.model;
  }
  EXPECT_EQ(test::list_dir(refs), table);
}

// The comparison itself can fail: a perturbed output, a NaN, a wrong shape.
TEST(ModelReferences, ComparisonCatchesADifference) {
  const std::string refs = std::string(CUVIL_SOURCE_DIR) + "/testdata/models/refs/gpt2_tiny/";
  const Npy want = read_npy(refs + "logits.npy");
  ASSERT_TRUE(want.error.empty()) << want.error;
  ASSERT_EQ(want.shape, (std::vector<int64_t>{2, 7, 512}));
  EXPECT_TRUE(close_to("logits", want, want));

  auto with_element = [&](size_t i, float v) {
    Npy n = want;
    std::memcpy(&n.data[i * 4], &v, 4);
    return n;
  };
  float w0;
  std::memcpy(&w0, &want.data[4 * 1000], 4);
  // Within tolerance passes; just past it fails and names the element.
  EXPECT_TRUE(close_to("logits", with_element(1000, w0 + 0.5f * static_cast<float>(kAtol)), want));
  const float past_tolerance = w0 + 3 * static_cast<float>(kAtol + kRtol * std::fabs(w0));
  ::testing::AssertionResult r = close_to("logits", with_element(1000, past_tolerance), want);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("worst at [0, 1, 488] (flat 1000)"), std::string::npos) << r.message();
  EXPECT_NE(std::string(r.message()).find("1 of 7168 elements"), std::string::npos) << r.message();
  EXPECT_FALSE(close_to("logits", with_element(5, NAN), want));
  Npy reshaped = want;
  reshaped.shape = {7, 2, 512};
  r = close_to("logits", reshaped, want);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("got <f4 [7, 2, 512], want <f4 [2, 7, 512]"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace cuvil
