// The device form of a program for the PTX megakernel (codegen/ptx/megakernel.inc, docs/ptx.md):
// build_device_program flattens a loaded Program once (kernels, tile bodies, access maps by
// expression id, and which tensors each kernel reads and writes) and refuses what the
// megakernel cannot run yet, naming the first such instruction; bind_device_run then makes
// one run's plain arrays on the host: every expression of the program evaluated (the GPU
// mapping's "bind"), the tensors' addresses, every access map proven in bounds as the CPU
// interpreter does, the task list (one task per RunKernel) with its tile geometry and its
// waits (RAW, WAR and WAW on the bytes each kernel's maps may touch, arena aliasing
// included), the counters, the ticket and the status word. The same arrays feed the host grid
// emulator (runtime/gpu/grid_emulator.h) and, later, the CUDA launcher.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/ptx/megakernel_abi.h"
#include "runtime/expr_eval.h"
#include "runtime/op_kernel.h"
#include "runtime/program.h"
#include "runtime/status.h"

namespace cuvil::rt::gpu {

// Shared memory a block may use for its tile registers (docs/isa.md "GPU mapping": two
// blocks per SM of an H100/H200).
constexpr int64_t kDefaultRegisterBudget = 96 * 1024;
// Floats per register at most (the CPU's kTileRegisterElements).
constexpr int64_t kMaxDeviceRegisterElements = 4096;

struct DeviceFormOptions {
  int64_t register_budget_bytes = kDefaultRegisterBudget;
};

struct DeviceProgram {
  std::vector<MkKernel> kernels;
  std::vector<mk_u32> body;
  std::vector<MkMap> maps;
  std::vector<uint32_t> task_kernels;  // per task (RunKernel, in program order) its kernel
  // Per kernel: map indices (into its maps) that it writes (Store) and reads (Load, Mma).
  std::vector<std::vector<uint32_t>> writes, reads;
  std::vector<std::string> kernel_names;
  int64_t register_budget_bytes = kDefaultRegisterBudget;
  // Which tile opcodes the program uses (for the specialiser and reports).
  std::vector<bool> uses_opcode;
};

// The megakernel's MK_OPCODE_MASK for this program (codegen/ptx/megakernel.inc): bit i for
// each tile opcode it uses. Building the megakernel with it drops every other handler.
uint32_t megakernel_opcode_mask(const DeviceProgram& dp);

// Refuses (kUnsupported, "... not lowerable to the megakernel yet: ...") programs with CallOp,
// Copy or control flow, domains over MK_MAX_RANK, and kernels whose registers cannot hold one
// chunk within the register budget.
Status build_device_program(const Program& program, const DeviceFormOptions& options, DeviceProgram* out);

// One run's arrays. params() points into this object: keep it alive and unmoved while the
// kernel runs.
struct DeviceRun {
  std::vector<mk_i64> values;
  std::vector<MkTensor> tensors;
  std::vector<MkTask> tasks;
  std::vector<MkWait> waits;
  std::vector<mk_u32> counters;
  mk_u64 ticket = 0;
  mk_u32 status = MK_OK, status_task = MK_NONE, stop = 0;
  mk_i64 total_tickets = 0;
  mk_u32 smem_floats = 0;    // per block: the largest task's header + register file
  mk_u32 fail_task = MK_NONE;  // tests: make this task fail on the device
  MkParams params(const DeviceProgram& dp);
  // Cancel or deadline, from any thread while the kernel runs: every block stops at its next
  // ticket or wait, and the status becomes MK_CANCELLED.
  void request_stop() { __atomic_store_n(&stop, 1u, __ATOMIC_RELAXED); }
};

// `eval` has the run's symbols bound (every expression must evaluate); `views` holds every
// tensor of the program with storage (inputs, weights, outputs, arena slices).
Status bind_device_run(const Program& program, const DeviceProgram& dp, ExprEvaluator& eval,
                       const std::vector<TensorView>& views, DeviceRun* out);

// The status word after a run as a Status naming the task's kernel.
Status status_from_device(const DeviceProgram& dp, const DeviceRun& run);

}  // namespace cuvil::rt::gpu
