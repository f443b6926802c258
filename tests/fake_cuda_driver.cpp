// A stand-in for libcuda.so.1 (suite CliDevice): the driver entry points runtime/cuda/driver.h
// resolves, answering from environment variables so that a test can play a machine without a
// device, with an old one, or with a current one, on a machine that has no GPU at all.
//   FAKE_CUDA_INIT_ERROR  cuInit returns this error code (e.g. 100 = CUDA_ERROR_NO_DEVICE)
//   FAKE_CUDA_DEVICES     the device count (default 1)
//   FAKE_CUDA_SM          compute capability as major*10+minor (default 90)
// Everything that would touch a device fails with CUDA_ERROR_NOT_SUPPORTED (801).
#include <cstdlib>
#include <cstring>

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
constexpr int kNotSupported = 801;
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
int cuCtxCreate_v2(void**, unsigned, int) { return kNotSupported; }
int cuCtxDestroy_v2(void*) { return kNotSupported; }
int cuCtxSynchronize() { return kNotSupported; }
int cuModuleLoadDataEx(void**, const void*, unsigned, int*, void**) { return kNotSupported; }
int cuModuleUnload(void*) { return kNotSupported; }
int cuModuleGetFunction(void**, void*, const char*) { return kNotSupported; }
int cuMemAlloc_v2(unsigned long long*, size_t) { return kNotSupported; }
int cuMemFree_v2(unsigned long long) { return kNotSupported; }
int cuMemcpyHtoD_v2(unsigned long long, const void*, size_t) { return kNotSupported; }
int cuMemcpyDtoH_v2(void*, unsigned long long, size_t) { return kNotSupported; }
int cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                   void**) {
  return kNotSupported;
}
int cuOccupancyMaxActiveBlocksPerMultiprocessor(int*, void*, int, size_t) { return kNotSupported; }
}
