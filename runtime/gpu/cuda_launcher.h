// The CUDA launcher of the PTX megakernel (docs/ptx.md, issue 12): a whole run of a loaded
// package on device 0 through the driver opened at run time (runtime/cuda/driver.h). It loads
// the package's PTX (the JIT's error log becomes the status message), copies every host region
// a tensor of the run lies in (weights, inputs, arena, outputs) to device memory, rewrites the
// bound device form's tensor addresses to their device copies, launches one persistent grid
// sized by the occupancy API, and copies the written regions back; the device status word
// becomes the same status codes as on the CPU. Programs the device form refuses (whole-tensor
// ops, control flow) are refused here too. Tested without a GPU through the stand-in driver of
// the tests (tests/fake_cuda_driver.cpp), which runs a launch on the host grid emulator;
// scripts/gpu_check.sh is where it meets a real GPU.
#pragma once

#include <vector>

#include "runtime/gpu/grid_emulator.h"
#include "runtime/package.h"

namespace cuvil::rt::gpu {

struct CudaRunOptions {
  int threads_per_block = 128;  // the megakernel's 168 registers allow 128-thread blocks twice per SM
  DeviceFormOptions form;
};

// What the launch used, for reports and tests.
struct CudaRunInfo {
  int blocks = 0, threads_per_block = 0;
  int64_t shared_bytes = 0;
};

Status run_package_cuda(const LoadedPackage& package, const std::vector<HostTensor>& inputs,
                        const CudaRunOptions& options, std::vector<HostTensor>* outputs,
                        CudaRunInfo* info = nullptr);

}  // namespace cuvil::rt::gpu
