// A stand-in for libcuda.so.1 (suite CliDevice): the driver entry points runtime/cuda/driver.h
// resolves, answering from environment variables so that a test can play a machine without a
// device, with an old one, or with a current one, on a machine that has no GPU at all.
//   FAKE_CUDA_INIT_ERROR  cuInit returns this error code (e.g. 100 = CUDA_ERROR_NO_DEVICE)
//   FAKE_CUDA_DEVICES     the device count (default 1)
//   FAKE_CUDA_SM          compute capability as major*10+minor (default 90)
//   FAKE_CUDA_EMULATE     1: "device" memory is host memory and a launch of cuvil_megakernel
//                         runs on the host grid emulator (runtime/gpu/grid_emulator.h), with at
//                         most 4 blocks of at most 4 threads whatever the launch asks (the
//                         megakernel is correct for any grid); the JIT accepts PTX text that
//                         has `.entry cuvil_megakernel` and refuses anything else with a log.
//   FAKE_CUDA_JIT_FAIL    1: the JIT refuses every PTX (with a log)
// Without FAKE_CUDA_EMULATE everything that would touch a device fails with
// CUDA_ERROR_NOT_SUPPORTED (801).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/gpu/grid_emulator.h"

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
constexpr int kNotSupported = 801;
constexpr int kInvalidPtx = 218, kNotFound = 500;
bool emulate() { return env_int("FAKE_CUDA_EMULATE", 0) == 1; }
int g_kernel_tag = 0;  // the one function handle: its address
}  // namespace

extern "C" {
int cuInit(unsigned) { return env_int("FAKE_CUDA_INIT_ERROR", 0); }
int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
int cuGetErrorString(int r, const char** s) {
  *s = r == 100 ? "no CUDA-capable device is detected" : "fake driver error";
  return 0;
}
int cuDeviceGetCount(int* n) { *n = env_int("FAKE_CUDA_DEVICES", 1); return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDeviceGetName(char* name, int len, int) {
  std::strncpy(name, "Fake GPU", static_cast<size_t>(len));
  return 0;
}
int cuDeviceGetAttribute(int* v, int attr, int) {
  const int sm = env_int("FAKE_CUDA_SM", 90);
  *v = attr == 75 ? sm / 10 : attr == 76 ? sm % 10 : attr == 16 ? 132 : 0;
  return 0;
}
int cuCtxCreate_v2(void** ctx, unsigned, int) {
  if (!emulate()) return kNotSupported;
  *ctx = &g_kernel_tag;
  return 0;
}
int cuCtxDestroy_v2(void*) { return emulate() ? 0 : kNotSupported; }
int cuCtxSynchronize() { return emulate() ? 0 : kNotSupported; }
int cuModuleLoadDataEx(void** module, const void* image, unsigned n, int* opts, void** vals) {
  if (!emulate()) return kNotSupported;
  if (env_int("FAKE_CUDA_JIT_FAIL", 0) == 1 || !std::strstr(static_cast<const char*>(image), ".entry cuvil_megakernel")) {
    for (unsigned i = 0; i < n; ++i)
      if (opts[i] == 5) std::strcpy(static_cast<char*>(vals[i]), "ptxas fatal: fake JIT found no .entry cuvil_megakernel");
    return kInvalidPtx;
  }
  *module = &g_kernel_tag;
  return 0;
}
int cuModuleUnload(void*) { return emulate() ? 0 : kNotSupported; }
int cuModuleGetFunction(void** fn, void*, const char* name) {
  if (!emulate()) return kNotSupported;
  if (std::strcmp(name, "cuvil_megakernel") != 0) return kNotFound;
  *fn = &g_kernel_tag;
  return 0;
}
int cuFuncSetAttribute(void*, int, int) { return emulate() ? 0 : kNotSupported; }
int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  if (!emulate()) return kNotSupported;
  *p = reinterpret_cast<unsigned long long>(std::malloc(bytes));
  return *p ? 0 : 2;  // CUDA_ERROR_OUT_OF_MEMORY
}
int cuMemFree_v2(unsigned long long p) {
  if (!emulate()) return kNotSupported;
  std::free(reinterpret_cast<void*>(p));
  return 0;
}
int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t bytes) {
  if (!emulate()) return kNotSupported;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return 0;
}
int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t bytes) {
  if (!emulate()) return kNotSupported;
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return 0;
}
int cuLaunchKernel(void* fn, unsigned gx, unsigned, unsigned, unsigned bx, unsigned, unsigned, unsigned smem, void*,
                   void** args, void**) {
  if (!emulate()) return kNotSupported;
  if (fn != &g_kernel_tag || !args) return 1;  // CUDA_ERROR_INVALID_VALUE
  const MkParams* params = *static_cast<const MkParams* const*>(args[0]);
  if (smem < params->smem_floats * sizeof(float)) return 1;
  cuvil::rt::gpu::EmulatorOptions o;
  o.blocks = static_cast<int>(std::min(gx, 4u));
  o.threads_per_block = static_cast<int>(std::min(bx, 4u));
  return cuvil::rt::gpu::emulate_grid(*params, o).is_ok() ? 0 : 2;
}
int cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void*, int, size_t) {
  if (!emulate()) return kNotSupported;
  *n = 2;
  return 0;
}
}
