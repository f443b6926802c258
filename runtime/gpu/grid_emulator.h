// The host grid emulator of the PTX megakernel (docs/ptx.md): the megakernel's own source
// (codegen/ptx/megakernel.inc, built as host C++) run with blocks as groups of std::threads.
// Each block has `threads_per_block` threads sharing a per-block buffer (its shared memory)
// and a barrier (its __syncthreads); the counters, the ticket and the status word are the
// DeviceRun's, updated with the same acquire/release operations as on the GPU. So the
// scheduler, the counters and every tile instruction are tested here against the CPU
// interpreter, and under ThreadSanitizer. Every block is resident (a thread), as the
// persistent grid on the GPU must be.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/gpu/device_program.h"
#include "runtime/package.h"

namespace cuvil::rt::gpu {

struct EmulatorOptions {
  int blocks = 1;
  int threads_per_block = 1;
  // Called by each block's thread 0 after it took a tile and its waits hold, before it runs
  // the tile (tests: random delays).
  std::function<void(uint32_t task, int64_t tile)> tile_hook;
};

// Runs the megakernel on `run` (made by bind_device_run); the status word as a Status.
Status emulate_megakernel(const DeviceProgram& dp, DeviceRun& run, const EmulatorOptions& options);
// The grid alone: options.blocks blocks of options.threads_per_block threads run the megakernel
// on `params` (a launch, as the stand-in CUDA driver of the tests makes it); an error only when
// the grid cannot start. The status word is the caller's to read.
Status emulate_grid(const MkParams& params, const EmulatorOptions& options);

struct HostTensor {
  DType dtype = DType::Float;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

// A whole run of a loaded package on the emulator, as a session would do it on a GPU: binds
// the inputs' dims, selects the bucket, gives every tensor storage (weights in place, one
// arena), builds and binds the device form and emulates it. Inputs in program order.
struct EmulatedRunOptions {
  EmulatorOptions emulator;
  DeviceFormOptions form;
  uint32_t fail_task = MK_NONE;  // tests: DeviceRun::fail_task
  bool stop = false;             // tests: the host's stop word set before the run
};
Status run_package_emulated(const LoadedPackage& package, const std::vector<HostTensor>& inputs,
                            const EmulatedRunOptions& options, std::vector<HostTensor>* outputs);

// The same run with another executor of the bound device form (the CUDA launcher,
// runtime/gpu/cuda_launcher.h): `regions` lists every host buffer a tensor of the run lies in
// (the arena, the weights, the inputs, the owned outputs and intermediates); those marked
// `written` must hold the device's results when the executor returns.
struct HostRegion {
  void* data;
  size_t bytes;
  bool written;
};
using DeviceExecutor = std::function<Status(const DeviceProgram&, DeviceRun&, const std::vector<HostRegion>&)>;
Status run_package_on(const LoadedPackage& package, const std::vector<HostTensor>& inputs,
                      const DeviceFormOptions& form, const DeviceExecutor& execute,
                      std::vector<HostTensor>* outputs);

}  // namespace cuvil::rt::gpu
