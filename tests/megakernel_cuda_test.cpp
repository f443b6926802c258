// The CUDA launcher of the megakernel (runtime/gpu/cuda_launcher.h), suite MegakernelCuda, on a
// machine without a GPU: the runtime opens the tests' stand-in driver (fake_cuda_driver.cpp)
// in its emulating mode, where device memory is host memory and a launch runs the megakernel's
// host build on the grid emulator. So everything the launcher does on the host side (JIT
// errors, uploads, address translation, the occupancy-sized persistent grid, the status word,
// copying results back) is tested here; scripts/gpu_check.sh runs the same launcher on a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "onnx_builder.h"
#include "run_tool.h"
#include "runtime/cuda/driver.h"
#include "runtime/gpu/cuda_launcher.h"
#include "runtime/package.h"

namespace cuvil {
namespace {

using rt::gpu::HostTensor;
using test::RunResult;
using test::run_tool;
using test::TempDir;
using Tp = onnx::TensorProto;

class MegakernelCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CUVIL_CUDA_DRIVER", CUVIL_FAKE_CUDA, 1);
    setenv("FAKE_CUDA_EMULATE", "1", 1);
    unsetenv("FAKE_CUDA_JIT_FAIL");
    rt::cuda::reset_probe_for_testing();
  }
  void TearDown() override {
    unsetenv("CUVIL_CUDA_DRIVER");
    unsetenv("FAKE_CUDA_EMULATE");
    unsetenv("FAKE_CUDA_JIT_FAIL");
    rt::cuda::reset_probe_for_testing();
  }
  // a[m, 70] x w[70, 45] + bias, Relu: tile kernels only (Mma and elementwise).
  std::shared_ptr<rt::LoadedPackage> compile(const std::vector<std::string>& extra = {}) {
    auto m = test::make_model(17);
    auto* g = m.mutable_graph();
    test::add_input(g, "a", Tp::FLOAT, {"m", 70});
    test::add_input(g, "w", Tp::FLOAT, {70, 45});
    test::add_input(g, "bias", Tp::FLOAT, {45});
    test::add_output(g, "y", Tp::FLOAT, {"m", 45});
    test::add_node(g, "MatMul", {"a", "w"}, {"mm"});
    test::add_node(g, "Add", {"mm", "bias"}, {"z"});
    test::add_node(g, "Relu", {"z"}, {"y"});
    std::vector<std::string> args = {"compile", test::write_model(tmp_.path(), m, "mm.onnx"), "-o",
                                     tmp_.file("mm.cuvir"), "--dim", "m=1:200"};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = run_tool(tmp_.path(), CUVIL_CUVILC, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::shared_ptr<rt::LoadedPackage> pkg;
    rt::Status st = rt::LoadedPackage::open_file(tmp_.file("mm.cuvir"), &pkg);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return pkg;
  }
  static HostTensor floats(std::vector<int64_t> dims, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (float& x : v) x = u(rng);
    HostTensor t;
    t.dims = std::move(dims);
    t.bytes.resize(v.size() * 4);
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
  }
  TempDir tmp_;
};

TEST_F(MegakernelCuda, LaunchMatchesTheEmulatorBitForBit) {
  auto pkg = compile();
  ASSERT_TRUE(pkg);
  if (pkg->ptx().empty()) GTEST_SKIP() << "this cuvilc has no megakernel PTX (built without clang-19)";
  ASSERT_TRUE(rt::cuda::probe().usable) << rt::cuda::probe().reason;
  for (int64_t rows : {1, 7, 130}) {
    const std::vector<HostTensor> in = {floats({rows, 70}, 1), floats({70, 45}, 2), floats({45}, 3)};
    std::vector<HostTensor> want, got;
    rt::gpu::EmulatedRunOptions eo;
    ASSERT_TRUE(rt::gpu::run_package_emulated(*pkg, in, eo, &want).is_ok());
    rt::gpu::CudaRunInfo info;
    rt::Status st = rt::gpu::run_package_cuda(*pkg, in, {}, &got, &info);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].dims, want[0].dims);
    EXPECT_EQ(got[0].bytes, want[0].bytes) << "rows " << rows;
    EXPECT_EQ(info.threads_per_block, 128);
    EXPECT_GE(info.blocks, 1);
    EXPECT_GT(info.shared_bytes, 0);
  }
}

TEST_F(MegakernelCuda, JitRefusalCarriesTheLog) {
  auto pkg = compile();
  ASSERT_TRUE(pkg);
  if (pkg->ptx().empty()) GTEST_SKIP() << "this cuvilc has no megakernel PTX (built without clang-19)";
  setenv("FAKE_CUDA_JIT_FAIL", "1", 1);
  std::vector<HostTensor> got;
  rt::Status st = rt::gpu::run_package_cuda(*pkg, {floats({2, 70}, 1), floats({70, 45}, 2), floats({45}, 3)}, {}, &got);
  EXPECT_EQ(st.code(), rt::StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("the driver's JIT refused the package's PTX"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("JIT log: ptxas fatal: fake JIT"), std::string::npos) << st.message();
}

TEST_F(MegakernelCuda, RefusalsBeforeAnyLaunch) {
  auto pkg = compile({"--no-ptx"});
  ASSERT_TRUE(pkg);
  std::vector<HostTensor> got;
  const std::vector<HostTensor> in = {floats({2, 70}, 1), floats({70, 45}, 2), floats({45}, 3)};
  rt::Status st = rt::gpu::run_package_cuda(*pkg, in, {}, &got);
  EXPECT_EQ(st.code(), rt::StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("no PTX section"), std::string::npos) << st.message();
  rt::gpu::CudaRunOptions odd;
  odd.threads_per_block = 100;
  pkg = compile();
  ASSERT_TRUE(pkg);
  if (!pkg->ptx().empty()) {
    st = rt::gpu::run_package_cuda(*pkg, in, odd, &got);
    EXPECT_EQ(st.code(), rt::StatusCode::kInvalidArgument) << st.message();
  }
  // Without a driver: the probe's reason.
  setenv("CUVIL_CUDA_DRIVER", tmp_.file("no-libcuda.so").c_str(), 1);
  rt::cuda::reset_probe_for_testing();
  st = rt::gpu::run_package_cuda(*pkg, in, {}, &got);
  EXPECT_EQ(st.code(), rt::StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("no CUDA driver"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace cuvil
