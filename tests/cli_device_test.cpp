// --device cpu|cuda|auto (suite CliDevice): cuvil-run on a machine without a usable GPU. The
// NVIDIA driver is opened at run time; CUVIL_CUDA_DRIVER points the runtime at a missing file
// or at a stand-in driver (fake_cuda_driver.cpp) that plays no device, an old device or a
// current one. `cuda` must fail with exit 4 and a one-line reason; `auto` must run on the CPU
// and say why in the run report.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "onnx_builder.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::run_tool;
using test::TempDir;
using Tp = onnx::TensorProto;

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" << (text)

class CliDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    onnx::ModelProto m = test::make_model();
    auto* g = m.mutable_graph();
    test::add_input(g, "x", Tp::FLOAT, {2, 3});
    test::add_node(g, "Relu", {"x"}, {"y"}, "relu");
    test::add_output(g, "y", Tp::FLOAT, {2, 3});
    package_ = tmp_.file("relu.cuvir");
    RunResult r = run_tool(tmp_.path(), CUVIL_CUVILC,
                           {"compile", test::write_model(tmp_.path(), m, "relu.onnx"), "-o", package_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // cuvil-run with the given driver file and fake-driver settings ("NAME=value ...").
  RunResult run(const std::string& driver, const std::string& env, std::vector<std::string> args) {
    args.insert(args.begin(), package_);
    return run_tool(tmp_.path(), CUVIL_RUN, args,
                    "env CUVIL_CUDA_DRIVER=" + test::shell_quote(driver) + " " + env + " ");
  }
  std::string report() { return test::read_bytes(tmp_.file("report.json")); }
  TempDir tmp_;
  std::string package_;
};

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST_F(CliDevice, CudaWithoutDriverExitsUnsupported) {
  RunResult r = run(tmp_.file("no-such-libcuda.so"), "", {"--device", "cuda"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_MENTIONS(r.err, "no CUDA driver: cannot open");
  EXPECT_MENTIONS(r.err, "no-such-libcuda.so");
  EXPECT_EQ(lines(r.err), 1) << r.err;
}

TEST_F(CliDevice, AutoWithoutDriverRunsOnCpuAndSaysWhy) {
  RunResult r = run(tmp_.file("no-such-libcuda.so"), "", {"--device", "auto", "--report", tmp_.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_MENTIONS(report(), "\"device\": \"cpu\"");
  EXPECT_MENTIONS(report(), "no CUDA driver");
}

TEST_F(CliDevice, CpuNeverOpensTheDriver) {
  RunResult r = run(tmp_.file("no-such-libcuda.so"), "", {"--device", "cpu", "--report", tmp_.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_MENTIONS(report(), "\"device_note\": \"\"");
}

TEST_F(CliDevice, DriverWithoutDevice) {
  RunResult r = run(CUVIL_FAKE_CUDA, "FAKE_CUDA_DEVICES=0", {"--device", "cuda"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_MENTIONS(r.err, "no CUDA device");
  r = run(CUVIL_FAKE_CUDA, "FAKE_CUDA_INIT_ERROR=100", {"--device", "cuda"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_MENTIONS(r.err, "cuInit failed: CUDA error 100 (no CUDA-capable device is detected)");
}

TEST_F(CliDevice, DeviceOlderThanSm80) {
  RunResult r = run(CUVIL_FAKE_CUDA, "FAKE_CUDA_SM=75", {"--device", "cuda"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_MENTIONS(r.err, "Fake GPU");
  EXPECT_MENTIONS(r.err, "sm_75; cuvil needs sm_80 or newer");
}

TEST_F(CliDevice, CurrentDeviceButPackageWithoutPtx) {
  // Packages carry the megakernel's PTX by default when cuvilc was built with clang-19.
  RunResult c = run_tool(tmp_.path(), CUVIL_CUVILC,
                         {"compile", tmp_.file("relu.onnx"), "-o", package_, "--no-ptx"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult r = run(CUVIL_FAKE_CUDA, "FAKE_CUDA_SM=90", {"--device", "cuda"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_MENTIONS(r.err, "the package has no PTX section");
  r = run(CUVIL_FAKE_CUDA, "FAKE_CUDA_SM=90", {"--device", "auto", "--report", tmp_.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_MENTIONS(report(), "\"device\": \"cpu\"");
  EXPECT_MENTIONS(report(), "no PTX section");
}

TEST_F(CliDevice, PackageWithPtxStillRunsOnTheCpu) {
  RunResult c = run_tool(tmp_.path(), CUVIL_CUVILC, {"compile", tmp_.file("relu.onnx"), "-o", package_, "--emit", "ptx"});
  if (c.exit_code != 0) GTEST_SKIP() << "this cuvilc has no megakernel PTX (built without clang-19): " << c.err;
  c = run_tool(tmp_.path(), CUVIL_CUVILC, {"compile", tmp_.file("relu.onnx"), "-o", package_});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult r = run(CUVIL_FAKE_CUDA, "FAKE_CUDA_SM=90", {"--device", "cuda"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_MENTIONS(r.err, "Fake GPU found, but this runtime cannot run programs on CUDA yet");
  r = run(CUVIL_FAKE_CUDA, "FAKE_CUDA_SM=90", {"--device", "auto"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CliDevice, UnknownDeviceIsAUsageError) {
  RunResult r = run(CUVIL_FAKE_CUDA, "", {"--device", "tpu"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_MENTIONS(r.err, "--device");
}

}  // namespace
}  // namespace cuvil
