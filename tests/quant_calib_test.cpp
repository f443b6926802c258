// W8A8 calibration: reading the calibration directory (every diagnostic of quant/calib_data.h)
// and the observers' range choices (quant/observer.h).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "cli/npy.h"
#include "onnx_builder.h"
#include "quant/calib_data.h"
#include "quant/observer.h"

namespace cuvil {
namespace {

using quant::CalibrationSample;
using quant::load_calibration_set;
using quant::ModelInput;
using test::FailsWith;
using test::TempDir;

tools::HostTensor f32(std::vector<int64_t> dims, float fill = 0.5f) {
  tools::HostTensor t;
  t.dtype = 1;
  t.dims = dims;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n), fill);
  for (size_t i = 0; i < v.size(); ++i) v[i] = fill + static_cast<float>(i);
  t.bytes.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void save(const std::string& path, const tools::HostTensor& t) {
  const std::string err = tools::write_npy(path, t);
  ASSERT_TRUE(err.empty()) << err;
}

const std::vector<ModelInput> kImage = {{"image", 1, {-1, 1, 2, 2}}};
const std::vector<ModelInput> kTwo = {{"a", 1, {-1, 3}}, {"b", 1, {-1, 3}}};

TEST(QuantCalibData, StackedFileWithLeadingSampleAxis) {
  TempDir d;
  save(d.file("image.npy"), f32({5, 2, 1, 2, 2}));
  const auto s = load_calibration_set(d.path(), kImage);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[3].inputs[0].dims, (std::vector<int64_t>{2, 1, 2, 2}));
  float first;
  std::memcpy(&first, s[3].inputs[0].bytes.data(), 4);
  EXPECT_EQ(first, 0.5f + 3 * 8);  // sample 3 is slice 3
  EXPECT_EQ(s[3].where, "sample 3");
}

TEST(QuantCalibData, FileOfTheInputsRankIsSamplesOfBatchOne) {
  TempDir d;
  save(d.file("image.npy"), f32({4, 1, 2, 2}));
  const auto s = load_calibration_set(d.path(), kImage);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[1].inputs[0].dims, (std::vector<int64_t>{1, 1, 2, 2}));
}

TEST(QuantCalibData, SampleFoldersInNumericOrder) {
  TempDir d;
  for (const char* n : {"10", "2", "1"}) {
    ASSERT_EQ(::mkdir(d.file(n).c_str(), 0755), 0);
    save(d.file(std::string(n) + "/a.npy"), f32({1, 3}, static_cast<float>(std::atoi(n))));
    save(d.file(std::string(n) + "/b.npy"), f32({1, 3}));
  }
  const auto s = load_calibration_set(d.path(), kTwo);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_NE(s[0].where.find("/1'"), std::string::npos) << s[0].where;
  EXPECT_NE(s[1].where.find("/2'"), std::string::npos) << s[1].where;
  EXPECT_NE(s[2].where.find("/10'"), std::string::npos) << s[2].where;
}

TEST(QuantCalibData, MissingFileForOneInput) {
  TempDir d;
  save(d.file("a.npy"), f32({2, 1, 3}));
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kTwo); }, ExitCode::kUsage,
                        {"no file for model input 'b'", d.file("b.npy")}));
}

TEST(QuantCalibData, MissingFileInASampleFolder) {
  TempDir d;
  ASSERT_EQ(::mkdir(d.file("0").c_str(), 0755), 0);
  save(d.file("0/a.npy"), f32({1, 3}));
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kTwo); }, ExitCode::kUsage,
                        {"sample folder", "no file for model input 'b'", d.file("0/b.npy")}));
}

TEST(QuantCalibData, DtypeMismatchNamesInputFileExpectedAndGot) {
  TempDir d;
  tools::HostTensor t = f32({3, 1, 1, 2, 2});
  t.dtype = 11;  // double
  t.bytes.resize(t.bytes.size() * 2);
  save(d.file("image.npy"), t);
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kImage); }, ExitCode::kUsage,
                        {"model input 'image'", d.file("image.npy"), "expected a leading sample axis before f32 [?, 1, 2, 2]",
                         "got f64 [3, 1, 1, 2, 2]"}));
}

TEST(QuantCalibData, ShapeMismatch) {
  TempDir d;
  save(d.file("image.npy"), f32({3, 1, 1, 2, 5}));
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kImage); }, ExitCode::kUsage,
                        {"does not fit model input 'image'", "got f32 [3, 1, 1, 2, 5]"}));
}

TEST(QuantCalibData, SampleCountsDiffer) {
  TempDir d;
  save(d.file("a.npy"), f32({2, 1, 3}));
  save(d.file("b.npy"), f32({3, 1, 3}));
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kTwo); }, ExitCode::kUsage,
                        {"holds 3 samples", "holds 2", "same number"}));
}

TEST(QuantCalibData, NanNamesTheSample) {
  TempDir d;
  tools::HostTensor t = f32({4, 1, 1, 2, 2});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(t.bytes.data() + 4 * (2 * 4 + 1), &nan, 4);  // sample 2, element 1
  save(d.file("image.npy"), t);
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kImage); }, ExitCode::kUsage,
                        {"sample 2 of input 'image'", "holds NaN at element 1", "must be finite"}));
}

TEST(QuantCalibData, InfInASampleFolder) {
  TempDir d;
  ASSERT_EQ(::mkdir(d.file("7").c_str(), 0755), 0);
  tools::HostTensor a = f32({1, 3});
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(a.bytes.data() + 8, &inf, 4);
  save(d.file("7/a.npy"), a);
  save(d.file("7/b.npy"), f32({1, 3}));
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kTwo); }, ExitCode::kUsage,
                        {"sample folder", "/7'", "input 'a'", "holds Inf at element 2"}));
}

TEST(QuantCalibData, EmptyDirectory) {
  TempDir d;
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kTwo); }, ExitCode::kUsage,
                        {"is empty", "a.npy, b.npy", "sample folders"}));
}

TEST(QuantCalibData, ZeroSamples) {
  TempDir d;
  save(d.file("image.npy"), f32({0, 1, 1, 2, 2}));
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kImage); }, ExitCode::kUsage, {"hold no samples"}));
}

TEST(QuantCalibData, NotADirectory) {
  TempDir d;
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.file("nope"), kImage); }, ExitCode::kIo,
                        {"not a readable directory", d.file("nope")}));
}

TEST(QuantCalibData, CorruptNpyNamesTheFile) {
  TempDir d;
  test::write_bytes(d.file("image.npy"), "not an npy file");
  EXPECT_TRUE(FailsWith([&] { load_calibration_set(d.path(), kImage); }, ExitCode::kUsage, {d.file("image.npy")}));
}

// ---- observers ----

QuantizeOptions opts() { return QuantizeOptions{}; }

TEST(QuantObserver, MinMaxCoversEverySampleAndZero) {
  quant::Observer o;
  const float a[] = {1, 2, 3}, b[] = {0.5f, 7};
  o.observe_range(a, 3, 0.01);
  o.observe_range(b, 2, 0.01);
  double lo, hi;
  o.choose_range(CalibrationMethod::kMinMax, opts(), &lo, &hi);
  EXPECT_EQ(lo, 0.0);  // widened to include zero
  EXPECT_EQ(hi, 7.0);
}

TEST(QuantObserver, EmaWeighsSamplesByAlpha) {
  quant::Observer o;
  const float a[] = {-1, 1}, b[] = {-3, 5};
  o.observe_range(a, 2, 0.25);
  o.observe_range(b, 2, 0.25);
  double lo, hi;
  o.choose_range(CalibrationMethod::kEma, opts(), &lo, &hi);
  EXPECT_DOUBLE_EQ(lo, 0.25 * -3 + 0.75 * -1);
  EXPECT_DOUBLE_EQ(hi, 0.25 * 5 + 0.75 * 1);
}

// A Gaussian with one far outlier: the histogram methods clip it, min/max does not.
quant::Observer gaussian_with_outlier(std::vector<float>* data) {
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0, 1);
  data->resize(100000);
  for (float& v : *data) v = g(rng);
  (*data)[17] = 40.0f;
  quant::Observer o;
  o.observe_range(data->data(), static_cast<int64_t>(data->size()), 0.01);
  o.observe_histogram(data->data(), static_cast<int64_t>(data->size()));
  return o;
}

TEST(QuantObserver, HistogramMethodsClipAnOutlier) {
  std::vector<float> data;
  const quant::Observer o = gaussian_with_outlier(&data);
  QuantizeOptions q;
  q.percentile = 99.9;
  for (CalibrationMethod m : {CalibrationMethod::kPercentile, CalibrationMethod::kEntropy, CalibrationMethod::kMse}) {
    double lo, hi;
    o.choose_range(m, q, &lo, &hi);
    // MSE weighs the outlier's clipping error squared ((40 - t)^2 against 1e5 values' rounding
    // noise), so its optimum clips less: about 27 here.
    EXPECT_LT(hi, m == CalibrationMethod::kMse ? 30.0 : 10.0) << calibration_method_name(m);
    EXPECT_GT(hi, 2.0) << calibration_method_name(m);
    EXPECT_EQ(lo, -hi) << calibration_method_name(m);  // two-sided data: symmetric clip of |x|
  }
  double lo, hi;
  o.choose_range(CalibrationMethod::kMinMax, q, &lo, &hi);
  EXPECT_EQ(hi, 40.0);
}

// A ReLU6's output: half exact zeros, the rest |N(0, 2)| capped at 6. Merging the zero spike
// into the first group of levels (TensorRT's form) clips at about 4; zero as its own level
// keeps the whole range.
TEST(QuantObserver, EntropyIsNotPulledDownByASpikeOfZeros) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0, 2);
  std::vector<float> v(100000, 0.0f);
  for (size_t i = 51000; i < v.size(); ++i) v[i] = std::min(std::fabs(g(rng)), 6.0f);
  quant::Observer o;
  o.observe_range(v.data(), static_cast<int64_t>(v.size()), 0.01);
  o.observe_histogram(v.data(), static_cast<int64_t>(v.size()));
  double lo, hi;
  o.choose_range(CalibrationMethod::kEntropy, opts(), &lo, &hi);
  EXPECT_EQ(lo, 0.0);
  EXPECT_GT(hi, 5.5);
}

TEST(QuantObserver, PercentileOfOneSidedDataKeepsZero) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 100.0f;  // 0 .. 9.99
  quant::Observer o;
  o.observe_range(v.data(), 1000, 0.01);
  o.observe_histogram(v.data(), 1000);
  QuantizeOptions q;
  q.percentile = 50;
  double lo, hi;
  o.choose_range(CalibrationMethod::kPercentile, q, &lo, &hi);
  EXPECT_EQ(lo, 0.0);
  EXPECT_NEAR(hi, 5.0, 0.05);
}

TEST(QuantObserver, ActivationParamsRepresentZeroExactly) {
  const quant::QuantParams a = quant::activation_params(-1.0, 3.0, false);
  EXPECT_FALSE(a.is_signed);
  EXPECT_FLOAT_EQ(a.scale, 4.0f / 255.0f);
  EXPECT_EQ(a.zero_point, 64);  // round(1 / (4/255)) = round(63.75)
  const quant::QuantParams s = quant::activation_params(-1.0, 3.0, true);
  EXPECT_TRUE(s.is_signed);
  EXPECT_FLOAT_EQ(s.scale, 3.0f / 127.0f);
  EXPECT_EQ(s.zero_point, 0);
  const quant::QuantParams z = quant::activation_params(0.0, 0.0, false);
  EXPECT_EQ(z.scale, 1.0f);  // a constant-zero activation still gets a valid scale
  EXPECT_FLOAT_EQ(quant::weight_scale(2.54), 0.02f);
}

}  // namespace
}  // namespace cuvil
