// The NVIDIA driver API, opened at run time (dlopen of libcuda.so.1), never linked: libcuvil
// works the same on machines without a GPU, and a missing or broken driver is a status the
// caller can report (CUVIL_UNSUPPORTED), never a load failure of libcuvil itself. Only the
// entry points the runtime needs are resolved, each by its versioned name where the driver has
// several (`cuMemAlloc_v2`, ...), as the driver's own headers would bind them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cuvil::rt::cuda {

// Driver API types, declared here so that no CUDA header is needed to build libcuvil.
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;
using CUjit_option = int;

// The driver entry points libcuvil uses (the table expands into the resolver and this struct).
#define CUVIL_CUDA_DRIVER_FUNCTIONS(X)                                                               \
  X(cuInit, "cuInit", CUresult(unsigned))                                                          \
  X(cuDriverGetVersion, "cuDriverGetVersion", CUresult(int*))                                      \
  X(cuGetErrorString, "cuGetErrorString", CUresult(CUresult, const char**))                        \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult(int*))                                          \
  X(cuDeviceGet, "cuDeviceGet", CUresult(CUdevice*, int))                                          \
  X(cuDeviceGetName, "cuDeviceGetName", CUresult(char*, int, CUdevice))                            \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult(int*, int, CUdevice))                   \
  X(cuCtxCreate, "cuCtxCreate_v2", CUresult(CUcontext*, unsigned, CUdevice))                        \
  X(cuCtxDestroy, "cuCtxDestroy_v2", CUresult(CUcontext))                                           \
  X(cuCtxSynchronize, "cuCtxSynchronize", CUresult())                                              \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx",                                                          \
    CUresult(CUmodule*, const void*, unsigned, CUjit_option*, void**))                             \
  X(cuModuleUnload, "cuModuleUnload", CUresult(CUmodule))                                          \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult(CUfunction*, CUmodule, const char*))      \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", CUresult(CUfunction, int, int))                         \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult(CUdeviceptr*, size_t))                                    \
  X(cuMemFree, "cuMemFree_v2", CUresult(CUdeviceptr))                                               \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUresult(CUdeviceptr, const void*, size_t))                    \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", CUresult(void*, CUdeviceptr, size_t))                          \
  X(cuLaunchKernel, "cuLaunchKernel",                                                                  \
    CUresult(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                 CUstream, void**, void**))                                                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor",       \
    CUresult(int*, CUfunction, int, size_t))

template <typename F>
using FnPtr = F*;

struct Driver {
#define CUVIL_CUDA_FIELD(field, symbol, type) FnPtr<type> field = nullptr;
  CUVIL_CUDA_DRIVER_FUNCTIONS(CUVIL_CUDA_FIELD)
#undef CUVIL_CUDA_FIELD
};

// Device attribute numbers of the driver API used here (CUdevice_attribute).
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
// CUfunction_attribute: dynamic shared memory a launch may ask for above the 48 KiB default.
constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
// CUjit_option: the JIT's error log.
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSizeBytes = 6;

// What the probe found. `usable` is false with `reason` one line saying why (no driver, a
// missing entry point, cuInit failed, no device, a device older than sm_80).
struct DeviceInfo {
  bool usable = false;
  std::string reason;
  std::string library;      // the file that was opened
  int driver_version = 0;   // e.g. 13000 for CUDA 13.0
  int device_count = 0;
  std::string name;         // device 0
  int sm_major = 0, sm_minor = 0, multiprocessors = 0;
};

// Opens the driver once per process (thread-safe; later calls return the first result) and
// describes device 0. The library is `libcuda.so.1`, or the file named by the environment
// variable CUVIL_CUDA_DRIVER (tests point it at a stand-in driver or at a missing file).
const DeviceInfo& probe();
// The resolved entry points; nullptr unless probe().usable.
const Driver* driver();
// Tests: forget the probe, so that the next probe() opens the driver again (after the test
// changed CUVIL_CUDA_DRIVER). Not while another thread may use the driver.
void reset_probe_for_testing();

// "cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" from a driver result.
std::string describe(const Driver& d, const char* call, CUresult r);

}  // namespace cuvil::rt::cuda
