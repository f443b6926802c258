#include "runtime/gpu/cuda_launcher.h"

#include <cstring>
#include <string>

#include "runtime/cuda/driver.h"

namespace cuvil::rt::gpu {
namespace {

using cuda::CUdeviceptr;
using cuda::CUresult;

// Device allocations of one run, freed when it ends (whatever the outcome).
class DeviceMemory {
 public:
  explicit DeviceMemory(const cuda::Driver& d) : d_(d) {}
  ~DeviceMemory() {
    for (CUdeviceptr p : ptrs_) d_.cuMemFree(p);
  }
  Status upload(const void* host, size_t bytes, CUdeviceptr* out) {
    CUdeviceptr p = 0;
    if (CUresult r = d_.cuMemAlloc(&p, bytes ? bytes : 1); r != 0)
      return Status(StatusCode::kOutOfMemory, cuda::describe(d_, "cuMemAlloc", r) + " (" + std::to_string(bytes) + " bytes)");
    ptrs_.push_back(p);
    if (bytes && host) {
      if (CUresult r = d_.cuMemcpyHtoD(p, host, bytes); r != 0)
        return Status(StatusCode::kRuntime, cuda::describe(d_, "cuMemcpyHtoD", r));
    }
    *out = p;
    return Status::ok();
  }
  template <typename T>
  Status upload(const std::vector<T>& v, CUdeviceptr* out) {
    return upload(v.data(), v.size() * sizeof(T), out);
  }

 private:
  const cuda::Driver& d_;
  std::vector<CUdeviceptr> ptrs_;
};

class Context {
 public:
  explicit Context(const cuda::Driver& d) : d_(d) {}
  ~Context() {
    if (module_) d_.cuModuleUnload(module_);
    if (ctx_) d_.cuCtxDestroy(ctx_);
  }
  Status open() {
    if (CUresult r = d_.cuCtxCreate(&ctx_, 0, 0); r != 0)
      return Status(StatusCode::kUnsupported, "device cuda: " + cuda::describe(d_, "cuCtxCreate", r));
    return Status::ok();
  }
  // The PTX through the driver's JIT; its error log in the message when it refuses.
  Status load(const std::string& ptx, cuda::CUfunction* fn) {
    std::string log(8192, '\0');
    cuda::CUjit_option opts[] = {cuda::kJitErrorLogBuffer, cuda::kJitErrorLogBufferSizeBytes};
    void* vals[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size() - 1))};
    if (CUresult r = d_.cuModuleLoadDataEx(&module_, ptx.c_str(), 2, opts, vals); r != 0) {
      log.resize(std::strlen(log.c_str()));
      return Status(StatusCode::kUnsupported, "device cuda: the driver's JIT refused the package's PTX: " +
                                                   cuda::describe(d_, "cuModuleLoadDataEx", r) +
                                                   (log.empty() ? std::string() : "; JIT log: " + log));
    }
    if (CUresult r = d_.cuModuleGetFunction(fn, module_, "cuvil_megakernel"); r != 0)
      return Status(StatusCode::kUnsupported,
                    "device cuda: the package's PTX has no cuvil_megakernel: " + cuda::describe(d_, "cuModuleGetFunction", r));
    return Status::ok();
  }

 private:
  const cuda::Driver& d_;
  cuda::CUcontext ctx_ = nullptr;
  cuda::CUmodule module_ = nullptr;
};

// The device address of a host address inside one of the regions (nullptr stays 0).
struct RegionMap {
  std::vector<HostRegion> host;
  std::vector<CUdeviceptr> device;
  bool translate(const char* p, CUdeviceptr* out) const {
    if (!p) {
      *out = 0;
      return true;
    }
    for (size_t i = 0; i < host.size(); ++i) {
      const char* b = static_cast<const char*>(host[i].data);
      if (p >= b && p <= b + host[i].bytes) {
        *out = device[i] + static_cast<CUdeviceptr>(p - b);
        return true;
      }
    }
    return false;
  }
};

Status launch(const cuda::Driver& d, const LoadedPackage& package, const CudaRunOptions& options,
              const DeviceProgram& dp, DeviceRun& run, const std::vector<HostRegion>& regions, CudaRunInfo* info) {
  Context ctx(d);
  CUVIL_RETURN_IF_ERROR(ctx.open());
  cuda::CUfunction fn = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.load(package.ptx().front().text, &fn));
  DeviceMemory mem(d);
  RegionMap map;
  map.host = regions;
  for (const HostRegion& r : regions) {
    CUdeviceptr p = 0;
    CUVIL_RETURN_IF_ERROR(mem.upload(r.data, r.bytes, &p));
    map.device.push_back(p);
  }
  std::vector<MkTensor> tensors = run.tensors;
  for (MkTensor& t : tensors) {
    CUdeviceptr p = 0;
    if (!map.translate(t.data, &p))
      return Status(StatusCode::kInvalidArgument, "device cuda: a tensor of the run lies outside every uploaded region");
    t.data = reinterpret_cast<char*>(static_cast<uintptr_t>(p));
  }
  MkParams params = run.params(dp);
  CUdeviceptr kernels, body, maps, values, dtensors, tasks, waits, counters, ticket, status, status_task, stop;
  CUVIL_RETURN_IF_ERROR(mem.upload(dp.kernels, &kernels));
  CUVIL_RETURN_IF_ERROR(mem.upload(dp.body, &body));
  CUVIL_RETURN_IF_ERROR(mem.upload(dp.maps, &maps));
  CUVIL_RETURN_IF_ERROR(mem.upload(run.values, &values));
  CUVIL_RETURN_IF_ERROR(mem.upload(tensors, &dtensors));
  CUVIL_RETURN_IF_ERROR(mem.upload(run.tasks, &tasks));
  CUVIL_RETURN_IF_ERROR(mem.upload(run.waits, &waits));
  CUVIL_RETURN_IF_ERROR(mem.upload(run.counters, &counters));
  CUVIL_RETURN_IF_ERROR(mem.upload(&run.ticket, sizeof run.ticket, &ticket));
  CUVIL_RETURN_IF_ERROR(mem.upload(&run.status, sizeof run.status, &status));
  CUVIL_RETURN_IF_ERROR(mem.upload(&run.status_task, sizeof run.status_task, &status_task));
  CUVIL_RETURN_IF_ERROR(mem.upload(&run.stop, sizeof run.stop, &stop));
  auto as = [](CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); };
  params.kernels = static_cast<const MkKernel*>(as(kernels));
  params.body = static_cast<const mk_u32*>(as(body));
  params.maps = static_cast<const MkMap*>(as(maps));
  params.values = static_cast<const mk_i64*>(as(values));
  params.tensors = static_cast<const MkTensor*>(as(dtensors));
  params.tasks = static_cast<const MkTask*>(as(tasks));
  params.waits = static_cast<const MkWait*>(as(waits));
  params.counters = static_cast<mk_u32*>(as(counters));
  params.ticket = static_cast<mk_u64*>(as(ticket));
  params.status = static_cast<mk_u32*>(as(status));
  params.status_task = static_cast<mk_u32*>(as(status_task));
  params.stop = static_cast<const mk_u32*>(as(stop));
  CUdeviceptr dparams = 0;
  CUVIL_RETURN_IF_ERROR(mem.upload(&params, sizeof params, &dparams));

  const int threads = options.threads_per_block;
  const size_t smem = static_cast<size_t>(run.smem_floats) * sizeof(float);
  if (smem > 48 * 1024) {
    if (CUresult r = d.cuFuncSetAttribute(fn, cuda::kFuncAttrMaxDynamicSharedSizeBytes, static_cast<int>(smem)); r != 0)
      return Status(StatusCode::kUnsupported, "device cuda: " + std::to_string(smem) + " bytes of shared memory per block: " +
                                                   cuda::describe(d, "cuFuncSetAttribute", r));
  }
  int per_sm = 0;
  if (CUresult r = d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem); r != 0)
    return Status(StatusCode::kUnsupported, "device cuda: " + cuda::describe(d, "cuOccupancyMaxActiveBlocksPerMultiprocessor", r));
  if (per_sm < 1)
    return Status(StatusCode::kUnsupported, "device cuda: no block of " + std::to_string(threads) + " threads with " +
                                                 std::to_string(smem) + " bytes of shared memory fits a multiprocessor");
  // Every block resident (the scheduler's no-deadlock condition), and no more blocks than tiles.
  int64_t blocks = static_cast<int64_t>(per_sm) * std::max(1, cuda::probe().multiprocessors);
  blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, run.total_tickets));
  if (info) *info = {static_cast<int>(blocks), threads, static_cast<int64_t>(smem)};
  void* args[] = {&dparams};
  if (CUresult r = d.cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1, static_cast<unsigned>(threads), 1, 1,
                                    static_cast<unsigned>(smem), nullptr, args, nullptr);
      r != 0)
    return Status(StatusCode::kRuntime, "device cuda: " + cuda::describe(d, "cuLaunchKernel", r));
  if (CUresult r = d.cuCtxSynchronize(); r != 0)
    return Status(StatusCode::kRuntime, "device cuda: the megakernel failed: " + cuda::describe(d, "cuCtxSynchronize", r));
  if (CUresult r = d.cuMemcpyDtoH(&run.status, status, sizeof run.status); r != 0)
    return Status(StatusCode::kRuntime, cuda::describe(d, "cuMemcpyDtoH", r));
  if (CUresult r = d.cuMemcpyDtoH(&run.status_task, status_task, sizeof run.status_task); r != 0)
    return Status(StatusCode::kRuntime, cuda::describe(d, "cuMemcpyDtoH", r));
  for (size_t i = 0; i < regions.size(); ++i)
    if (regions[i].written && regions[i].bytes)
      if (CUresult r = d.cuMemcpyDtoH(regions[i].data, map.device[i], regions[i].bytes); r != 0)
        return Status(StatusCode::kRuntime, cuda::describe(d, "cuMemcpyDtoH", r));
  return status_from_device(dp, run);
}

}  // namespace

Status run_package_cuda(const LoadedPackage& package, const std::vector<HostTensor>& inputs,
                        const CudaRunOptions& options, std::vector<HostTensor>* outputs, CudaRunInfo* info) {
  const cuda::Driver* d = cuda::driver();
  if (!d) return Status(StatusCode::kUnsupported, "device cuda: " + cuda::probe().reason);
  if (package.ptx().empty())
    return Status(StatusCode::kUnsupported, "device cuda: the package has no PTX section (compiled with --no-ptx?)");
  if (options.threads_per_block < 32 || options.threads_per_block > 1024 || options.threads_per_block % 32)
    return make_status(StatusCode::kInvalidArgument, "device cuda: ", options.threads_per_block,
                       " threads per block (a multiple of 32 in [32, 1024])");
  return run_package_on(
      package, inputs, options.form,
      [&](const DeviceProgram& dp, DeviceRun& run, const std::vector<HostRegion>& regions) {
        return launch(*d, package, options, dp, run, regions, info);
      },
      outputs);
}

}  // namespace cuvil::rt::gpu
