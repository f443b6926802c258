#include "runtime/gpu/grid_emulator.h"

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "codegen/ptx/megakernel.h"
#include "runtime/expr_eval.h"

namespace cuvil::rt::gpu {
namespace {

// A block's __syncthreads: every thread of the block waits until all have arrived. The mutex
// gives ThreadSanitizer (and the memory model) the happens-before edge shared memory needs.
class BlockBarrier {
 public:
  explicit BlockBarrier(int threads) : threads_(threads) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == threads_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }
  static void call(void* self) { static_cast<BlockBarrier*>(self)->wait(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int threads_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

// Every thread waits here until all are created, so that a thread the OS refuses leaves no
// block short of threads (its barrier would never open): then none runs.
class StartGate {
 public:
  void open(bool run) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = run ? 1 : 2;
    cv_.notify_all();
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return state_ != 0; });
    return state_ == 1;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int state_ = 0;
};

struct HookArg {
  const std::function<void(uint32_t, int64_t)>* fn;
};
void call_hook(void* arg, mk_u32 task, mk_i64 tile) { (*static_cast<HookArg*>(arg)->fn)(task, tile); }

}  // namespace

Status emulate_megakernel(const DeviceProgram& dp, DeviceRun& run, const EmulatorOptions& options) {
  const MkParams params = run.params(dp);
  CUVIL_RETURN_IF_ERROR(emulate_grid(params, options));
  return status_from_device(dp, run);
}

Status emulate_grid(const MkParams& params, const EmulatorOptions& options) {
  if (options.blocks < 1 || options.threads_per_block < 1 || options.blocks > 1024 ||
      options.threads_per_block > 1024)
    return make_status(StatusCode::kInvalidArgument, "megakernel emulator: ", options.blocks, " blocks of ",
                       options.threads_per_block, " threads (each must be in [1, 1024])");
  const int nb = options.blocks, nt = options.threads_per_block;
  std::vector<std::vector<float>> smem(static_cast<size_t>(nb), std::vector<float>(params.smem_floats));
  std::vector<std::unique_ptr<BlockBarrier>> barriers;
  for (int b = 0; b < nb; ++b) barriers.push_back(std::make_unique<BlockBarrier>(nt));
  HookArg hook{&options.tile_hook};
  StartGate gate;
  std::vector<std::thread> threads;
  bool refused = false;
  for (int b = 0; b < nb && !refused; ++b)
    for (int t = 0; t < nt && !refused; ++t) {
      mk::Ctx c{};
      c.tid = static_cast<mk_u32>(t);
      c.threads = static_cast<mk_u32>(nt);
      c.block = static_cast<mk_u32>(b);
      c.blocks = static_cast<mk_u32>(nb);
      c.smem = smem[static_cast<size_t>(b)].data();
      c.barrier = &BlockBarrier::call;
      c.barrier_arg = barriers[static_cast<size_t>(b)].get();
      c.tile_hook = options.tile_hook ? &call_hook : nullptr;
      c.tile_hook_arg = &hook;
      try {
        threads.emplace_back([c, &params, &gate] {
          if (gate.wait()) mk::run_block_host(c, params);
        });
      } catch (const std::system_error&) {
        refused = true;
      }
    }
  gate.open(!refused);
  for (std::thread& th : threads) th.join();
  if (refused)
    return make_status(StatusCode::kOutOfMemory, "megakernel emulator: the system refused a thread (",
                       nb, " blocks of ", nt, " threads)");
  return Status::ok();
}

Status run_package_emulated(const LoadedPackage& package, const std::vector<HostTensor>& inputs,
                            const EmulatedRunOptions& options, std::vector<HostTensor>* outputs) {
  return run_package_on(
      package, inputs, options.form,
      [&](const DeviceProgram& dp, DeviceRun& run, const std::vector<HostRegion>&) {
        run.fail_task = options.fail_task;
        run.stop = options.stop ? 1 : 0;
        return emulate_megakernel(dp, run, options.emulator);
      },
      outputs);
}

Status run_package_on(const LoadedPackage& package, const std::vector<HostTensor>& inputs,
                      const DeviceFormOptions& form, const DeviceExecutor& execute,
                      std::vector<HostTensor>* outputs) {
  // Bind symbols from the inputs' dims (as Session::bind_inputs), then pick the bucket.
  const Program& first = package.program();
  if (inputs.size() != first.inputs.size())
    return make_status(StatusCode::kInvalidArgument, "megakernel run: ", inputs.size(), " inputs given, the model has ",
                       first.inputs.size());
  auto bind = [&](const Program& p, ExprEvaluator& eval) -> Status {
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const TensorDesc& d = p.tensors[p.inputs[i]];
      if (d.dims.size() != inputs[i].dims.size() || d.dtype != inputs[i].dtype)
        return make_status(StatusCode::kInvalidArgument, "input '", d.name, "': dtype or rank differs from the model");
      for (size_t k = 0; k < d.dims.size(); ++k) {
        const uint32_t s = eval.as_symbol(d.dims[k]);
        if (s != kNone) CUVIL_RETURN_IF_ERROR(eval.bind(s, inputs[i].dims[k], "input '" + d.name + "'"));
      }
    }
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const TensorDesc& d = p.tensors[p.inputs[i]];
      for (size_t k = 0; k < d.dims.size(); ++k) {
        int64_t v = 0;
        CUVIL_RETURN_IF_ERROR(eval.eval(d.dims[k], &v));
        if (v != inputs[i].dims[k])
          return make_status(StatusCode::kShape, "input '", d.name, "' dim ", k, " is ", inputs[i].dims[k],
                             " but the model requires ", v);
      }
    }
    return Status::ok();
  };
  size_t chosen = package.programs().size() - 1;
  {
    ExprEvaluator eval(first);
    CUVIL_RETURN_IF_ERROR(bind(first, eval));
    const auto& guards = package.guards();
    for (size_t i = 0; i < guards.size(); ++i) {
      bool holds = true;
      for (const BucketGuard::Range& r : guards[i].ranges)
        if (!eval.bound(r.symbol) || eval.symbol_value(r.symbol) < r.lo || eval.symbol_value(r.symbol) > r.hi)
          holds = false;
      if (holds) {
        chosen = i;
        break;
      }
    }
  }
  const Program& p = package.programs()[chosen];
  ExprEvaluator eval(p);
  CUVIL_RETURN_IF_ERROR(bind(p, eval));
  DeviceProgram dp;
  CUVIL_RETURN_IF_ERROR(build_device_program(p, form, &dp));

  // Storage: inputs borrowed, weights in place, outputs and heap tensors owned, one arena.
  std::vector<TensorView> views(p.tensors.size());
  std::vector<std::vector<uint64_t>> owned;  // 8-byte aligned buffers
  auto alloc = [&](size_t bytes) {
    owned.emplace_back((bytes + 7) / 8 + 1, 0);
    return static_cast<void*>(owned.back().data());
  };
  int64_t arena_size = 0;
  if (p.arena_size != kNone) CUVIL_RETURN_IF_ERROR(eval.eval(p.arena_size, &arena_size));
  std::vector<uint64_t> arena(static_cast<size_t>(arena_size + 7) / 8 + 8, 0);
  char* arena_base = reinterpret_cast<char*>(arena.data());
  // Every host storage region a tensor may lie in, for an executor with memories of its own.
  std::vector<HostRegion> regions;
  regions.push_back({arena_base, arena.size() * 8, true});
  regions.push_back({const_cast<uint8_t*>(package.weights()), static_cast<size_t>(package.weights_size()), false});
  for (const HostTensor& in : inputs) regions.push_back({const_cast<uint8_t*>(in.bytes.data()), in.bytes.size(), false});
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    const TensorDesc& d = p.tensors[t];
    TensorView& v = views[t];
    v.dtype = d.dtype;
    v.dims.resize(d.dims.size());
    for (size_t k = 0; k < d.dims.size(); ++k) CUVIL_RETURN_IF_ERROR(eval.eval(d.dims[k], &v.dims[k]));
    switch (d.kind) {
      case TensorKind::kInput:
        v.data = const_cast<uint8_t*>(inputs[d.io_index].bytes.data());
        if (inputs[d.io_index].bytes.size() < v.bytes())
          return make_status(StatusCode::kInvalidArgument, "input '", d.name, "' has ", inputs[d.io_index].bytes.size(),
                             " bytes, its dims need ", v.bytes());
        break;
      case TensorKind::kWeight: v.data = const_cast<uint8_t*>(package.weights() + d.weight_offset); break;
      case TensorKind::kOutput: v.data = alloc(v.bytes()); break;
      case TensorKind::kIntermediate:
        if (d.arena_offset == kNone) {
          v.data = alloc(v.bytes());
        } else {
          int64_t off = 0;
          CUVIL_RETURN_IF_ERROR(eval.eval(d.arena_offset, &off));
          if (off < 0 || off + static_cast<int64_t>(v.bytes()) > arena_size)
            return make_status(StatusCode::kInvalidPackage, "tensor '", d.name, "' lies outside the arena");
          v.data = arena_base + off;
        }
        break;
    }
  }
  for (const std::vector<uint64_t>& o : owned) regions.push_back({const_cast<uint64_t*>(o.data()), o.size() * 8, true});
  DeviceRun run;
  CUVIL_RETURN_IF_ERROR(bind_device_run(p, dp, eval, views, &run));
  CUVIL_RETURN_IF_ERROR(execute(dp, run, regions));
  outputs->clear();
  for (uint32_t t : p.outputs) {
    const TensorView& v = views[t];
    HostTensor h;
    h.dtype = v.dtype;
    h.dims = v.dims;
    h.bytes.assign(static_cast<const uint8_t*>(v.data), static_cast<const uint8_t*>(v.data) + v.bytes());
    outputs->push_back(std::move(h));
  }
  return Status::ok();
}

}  // namespace cuvil::rt::gpu
