// Opening the NVIDIA driver at run time (driver.h). The probe runs once per process: dlopen,
// resolve every entry point of the table (a missing one makes the driver unusable, named),
// cuInit, count devices, and describe device 0. Nothing here allocates on the device.
#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace cuvil::rt::cuda {
namespace {

constexpr int kMinSmMajor = 8;  // the PTX megakernel targets sm_80 and newer (docs/ptx.md)

struct State {
  DeviceInfo info;
  Driver fns;
  void* handle = nullptr;
};

State& state() {
  static State s;
  return s;
}

void open_driver(State& s) {
  DeviceInfo& info = s.info;
  const char* env = std::getenv("CUVIL_CUDA_DRIVER");
  info.library = (env && *env) ? env : "libcuda.so.1";
  s.handle = dlopen(info.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!s.handle) {
    const char* err = dlerror();
    info.reason = "no CUDA driver: cannot open " + info.library + (err ? std::string(": ") + err : std::string());
    return;
  }
  Driver& d = s.fns;
#define CUVIL_CUDA_RESOLVE(field, symbol, type)                                                   \
  d.field = reinterpret_cast<FnPtr<type>>(dlsym(s.handle, symbol));                                     \
  if (!d.field) {                                                                                \
    info.reason = "the CUDA driver " + info.library + " has no entry point " symbol              \
                  " (driver too old?)";                                                          \
    return;                                                                                      \
  }
  CUVIL_CUDA_DRIVER_FUNCTIONS(CUVIL_CUDA_RESOLVE)
#undef CUVIL_CUDA_RESOLVE
  if (CUresult r = d.cuInit(0); r != 0) { info.reason = describe(d, "cuInit", r); return; }
  d.cuDriverGetVersion(&info.driver_version);
  if (CUresult r = d.cuDeviceGetCount(&info.device_count); r != 0) {
    info.reason = describe(d, "cuDeviceGetCount", r);
    return;
  }
  if (info.device_count <= 0) { info.reason = "no CUDA device (the driver reports none)"; return; }
  CUdevice dev = 0;
  if (CUresult r = d.cuDeviceGet(&dev, 0); r != 0) { info.reason = describe(d, "cuDeviceGet", r); return; }
  char name[256] = {};
  if (d.cuDeviceGetName(name, sizeof name - 1, dev) == 0) info.name = name;
  d.cuDeviceGetAttribute(&info.sm_major, kAttrComputeCapabilityMajor, dev);
  d.cuDeviceGetAttribute(&info.sm_minor, kAttrComputeCapabilityMinor, dev);
  d.cuDeviceGetAttribute(&info.multiprocessors, kAttrMultiprocessorCount, dev);
  if (info.sm_major < kMinSmMajor) {
    info.reason = "CUDA device 0 (" + info.name + ") is sm_" + std::to_string(info.sm_major) +
                  std::to_string(info.sm_minor) + "; cuvil needs sm_80 or newer";
    return;
  }
  info.usable = true;
}

}  // namespace

std::string describe(const Driver& d, const char* call, CUresult r) {
  const char* text = nullptr;
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  return std::string(call) + " failed: CUDA error " + std::to_string(r) + (text ? std::string(" (") + text + ")" : "");
}

static std::mutex& probe_mutex() {
  static std::mutex mu;
  return mu;
}
static bool g_probed = false;

const DeviceInfo& probe() {
  std::lock_guard<std::mutex> lock(probe_mutex());
  if (!g_probed) {
    open_driver(state());
    g_probed = true;
  }
  return state().info;
}

void reset_probe_for_testing() {
  std::lock_guard<std::mutex> lock(probe_mutex());
  State& s = state();
  if (s.handle) dlclose(s.handle);
  s = State{};
  g_probed = false;
}

const Driver* driver() { return probe().usable ? &state().fns : nullptr; }

}  // namespace cuvil::rt::cuda
