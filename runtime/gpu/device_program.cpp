#include "runtime/gpu/device_program.h"

#include <algorithm>
#include <cstring>

#include "runtime/cpu/tile_interpreter.h"
#include "runtime/verifier.h"
#include "support/checked.h"

namespace cuvil::rt::gpu {
namespace {

// Decodes a tile body into (opcode, operand words) pairs; the verifier has checked it.
template <typename Fn> void for_each_insn(const std::vector<uint32_t>& body, Fn&& fn) {
  for (size_t pc = 0; pc < body.size();) {
    const auto op = static_cast<TileOpcode>(body[pc]);
    const size_t n = std::strlen(tile_opcode_operands(op));
    fn(pc, op, &body[pc + 1]);
    pc += 1 + n;
  }
}

Status not_lowerable(size_t pc, Opcode op, const std::string& why) {
  return make_status(StatusCode::kUnsupported, "program instruction ", pc, " (", opcode_name(op),
                     ") is not lowerable to the megakernel yet: ", why);
}

// Floats per register of a kernel with `registers` registers within the budget (after the
// block's header), at most kMaxDeviceRegisterElements.
int64_t register_elements(int64_t budget_bytes, uint32_t registers) {
  const int64_t avail = budget_bytes / 4 - static_cast<int64_t>(MK_HEADER_FLOATS);
  if (registers == 0) return kMaxDeviceRegisterElements;
  return std::min<int64_t>(kMaxDeviceRegisterElements, std::max<int64_t>(0, avail / registers));
}

}  // namespace

Status build_device_program(const Program& program, const DeviceFormOptions& options, DeviceProgram* out) {
  DeviceProgram dp;
  dp.register_budget_bytes = options.register_budget_bytes;
  dp.uses_opcode.assign(static_cast<size_t>(TileOpcode::kCount), false);
  // Program level: a straight line of RunKernels ending with End.
  for (size_t pc = 0; pc < program.code.size();) {
    const auto op = static_cast<Opcode>(program.code[pc]);
    const size_t n = std::strlen(opcode_operands(op));
    if (op == Opcode::End) break;
    if (op == Opcode::RunKernel) {
      dp.task_kernels.push_back(program.code[pc + 1]);
    } else if (op == Opcode::CallOp) {
      const NodeRecord& node = program.nodes[program.code[pc + 1]];
      return not_lowerable(pc, op, "whole-tensor op " + node.op_type + " (node '" + node.name +
                                       "') runs only on the CPU");
    } else if (op == Opcode::Copy) {
      return not_lowerable(pc, op, "tensor copies run only on the CPU");
    } else {
      return not_lowerable(pc, op, "program-level control flow runs only on the CPU");
    }
    pc += 1 + n;
  }

  for (const TileKernel& k : program.kernels) {
    const std::string who = "kernel " + k.name;
    if (k.domain.size() > MK_MAX_RANK)
      return make_status(StatusCode::kUnsupported, who, ": domain rank ", k.domain.size(),
                         " is not lowerable to the megakernel yet (at most ", MK_MAX_RANK, ")");
    MkKernel mk{};
    mk.body_begin = static_cast<mk_u32>(dp.body.size());
    mk.body_end = mk.body_begin + static_cast<mk_u32>(k.body.size());
    mk.has_loop = k.loop_extent != kNone;
    mk.init_end = mk.body_begin + (mk.has_loop ? k.init_end : 0);
    mk.loop_end = mk.body_begin + (mk.has_loop ? k.loop_end : 0);
    mk.map_begin = static_cast<mk_u32>(dp.maps.size());
    mk.map_count = static_cast<mk_u32>(k.maps.size());
    mk.registers = k.registers;
    dp.body.insert(dp.body.end(), k.body.begin(), k.body.end());
    for (const AccessMap& am : k.maps) {
      MkMap m{};
      m.tensor = am.tensor;
      m.offset = am.offset;
      m.loop_stride = am.loop_stride;
      m.rank = static_cast<mk_u32>(am.strides.size());
      for (size_t i = 0; i < am.strides.size(); ++i) m.strides[i] = am.strides[i];
      dp.maps.push_back(m);
    }
    std::vector<uint32_t> reads, writes;
    bool chunks = false;
    for_each_insn(k.body, [&](size_t pc, TileOpcode op, const uint32_t* a) {
      dp.uses_opcode[static_cast<size_t>(op)] = true;
      if (op == TileOpcode::Store) writes.push_back(a[0]);
      if (op == TileOpcode::Load) reads.push_back(a[1]);
      if (op == TileOpcode::Mma) {
        reads.push_back(a[1]);
        reads.push_back(a[2]);
      }
      const bool in_loop = mk.has_loop && pc >= k.init_end && pc < k.loop_end;
      chunks = chunks || (in_loop && !tile_opcode_in_loop_only(op));
    });
    // A chunk register holds a tile element's whole chunk: at least loop_chunk floats.
    const int64_t elems = register_elements(dp.register_budget_bytes, k.registers);
    const int64_t need = chunks ? k.loop_chunk : 1;
    if (elems < need)
      return make_status(StatusCode::kUnsupported, who, ": its register file (", k.registers, " registers of ",
                         need, " floats, ", int64_t{k.registers} * need * 4 + MK_HEADER_FLOATS * 4,
                         " bytes with the block header) does not fit the megakernel's register budget of ",
                         dp.register_budget_bytes, " bytes");
    dp.kernels.push_back(mk);
    dp.reads.push_back(std::move(reads));
    dp.writes.push_back(std::move(writes));
    dp.kernel_names.push_back(k.name);
  }
  *out = std::move(dp);
  return Status::ok();
}

uint32_t megakernel_opcode_mask(const DeviceProgram& dp) {
  static_assert(static_cast<size_t>(TileOpcode::kCount) <= 32, "MK_OPCODE_MASK is 32 bits");
  uint32_t mask = 0;
  for (size_t i = 0; i < dp.uses_opcode.size(); ++i)
    if (dp.uses_opcode[i]) mask |= 1u << i;
  return mask;
}

MkParams DeviceRun::params(const DeviceProgram& dp) {
  MkParams p{};
  p.kernels = dp.kernels.data();
  p.body = dp.body.data();
  p.maps = dp.maps.data();
  p.values = values.data();
  p.tensors = tensors.data();
  p.tasks = tasks.data();
  p.waits = waits.data();
  p.counters = counters.data();
  p.ticket = &ticket;
  p.status = &status;
  p.status_task = &status_task;
  p.stop = &stop;
  p.total_tickets = total_tickets;
  p.num_tasks = static_cast<mk_u32>(tasks.size());
  p.smem_floats = smem_floats;
  p.fail_task = fail_task;
  return p;
}

Status bind_device_run(const Program& program, const DeviceProgram& dp, ExprEvaluator& eval,
                       const std::vector<TensorView>& views, DeviceRun* out) {
  DeviceRun run;
  // The bind: every expression, once.
  run.values.resize(program.exprs.size());
  for (uint32_t i = 0; i < program.exprs.size(); ++i) {
    bool unbound = false;
    int64_t v = 0;
    CUVIL_RETURN_IF_ERROR(eval.eval(i, &v, &unbound));
    run.values[i] = v;
    if (unbound)
      return make_status(StatusCode::kUnsupported, "megakernel: expression ", eval.to_string(i),
                         " depends on a symbol no input binds");
  }
  run.tensors.resize(program.tensors.size());
  for (size_t i = 0; i < program.tensors.size(); ++i) {
    MkTensor& t = run.tensors[i];
    t.data = static_cast<char*>(views[i].data);
    t.numel = views[i].numel();
    t.dtype = static_cast<mk_u32>(views[i].dtype);
  }

  // Tasks: the CPU interpreter's checks and tiling (runtime/cpu/tile_interpreter.cpp
  // run_tile_kernel), with the device's register size and Mma tiles of at most 64 x 64.
  const size_t ntasks = dp.task_kernels.size();
  run.tasks.resize(ntasks);
  int64_t smem = 0;
  for (size_t ti = 0; ti < ntasks; ++ti) {
    const uint32_t ki = dp.task_kernels[ti];
    const TileKernel& k = program.kernels[ki];
    const MkKernel& mk = dp.kernels[ki];
    MkTask& task = run.tasks[ti];
    task = MkTask{};
    task.kernel = ki;
    task.rank = static_cast<mk_u32>(k.domain.size());
    int64_t total = 1;
    for (size_t i = 0; i < k.domain.size(); ++i) {
      const int64_t d = run.values[k.domain[i]];
      if (d < 0) return make_status(StatusCode::kShape, "kernel ", k.name, ": negative extent ", d);
      auto t = checked_mul(total, d);
      if (!t) return make_status(StatusCode::kShape, "kernel ", k.name, ": domain size overflows");
      total = *t;
      task.dims[i] = d;
    }
    task.loop_extent = mk.has_loop ? run.values[k.loop_extent] : 0;
    if (task.loop_extent < 0)
      return make_status(StatusCode::kShape, "kernel ", k.name, ": negative loop extent ", task.loop_extent);
    if (total == 0) continue;  // no tiles, nothing touched
    const int64_t cols = k.domain.empty() ? 1 : task.dims[k.domain.size() - 1];
    const int64_t rows = total / cols;
    // Bounds: offset plus the extreme spans over the domain and the loop inside the tensor.
    for (size_t m = 0; m < k.maps.size(); ++m) {
      const AccessMap& am = k.maps[m];
      const TensorView& v = views[am.tensor];
      CUVIL_RETURN_IF_ERROR(check_map_tensor(program, k, m, v));
      std::vector<std::pair<int64_t, int64_t>> extents;
      for (size_t i = 0; i < k.domain.size(); ++i) extents.emplace_back(task.dims[i], run.values[am.strides[i]]);
      if (am.loop_stride != kNone) {
        if (task.loop_extent == 0) continue;
        extents.emplace_back(task.loop_extent, run.values[am.loop_stride]);
      }
      CUVIL_RETURN_IF_ERROR(check_map_span(program, k, m, v, run.values[am.offset], extents));
    }
    bool has_mma = false, chunks = false;
    for_each_insn(k.body, [&](size_t pc, TileOpcode op, const uint32_t*) {
      has_mma = has_mma || op == TileOpcode::Mma;
      const bool in_loop = mk.has_loop && pc >= k.init_end && pc < k.loop_end;
      chunks = chunks || (in_loop && !tile_opcode_in_loop_only(op));
    });
    const int64_t chunk =
        mk.has_loop ? std::max<int64_t>(1, std::min<int64_t>(k.loop_chunk, task.loop_extent)) : 1;
    const int64_t reg_elems = register_elements(dp.register_budget_bytes, k.registers);
    const int64_t budget = chunks ? reg_elems / chunk : reg_elems;
    if (budget < 1)  // build_device_program refuses such kernels; a chunk never grows past loop_chunk
      return make_status(StatusCode::kInvalidPackage, "kernel ", k.name, ": a chunk of ", chunk,
                         " steps does not fit a device register of ", reg_elems, " floats");
    constexpr int64_t kMmaTile = 64;
    const int64_t seg_rows = has_mma && k.domain.size() >= 2 ? task.dims[k.domain.size() - 2] : rows;
    const int64_t tile_cols = std::min(cols, has_mma ? std::min(kMmaTile, budget) : budget);
    int64_t tile_rows = std::max<int64_t>(1, std::min(seg_rows, budget / tile_cols));
    if (has_mma) tile_rows = std::min(tile_rows, kMmaTile);
    task.cols = cols;
    task.seg_rows = seg_rows;
    task.segments = rows / std::max<int64_t>(seg_rows, 1);
    task.tile_rows = tile_rows;
    task.tile_cols = tile_cols;
    task.tiles_r = (seg_rows + tile_rows - 1) / tile_rows;
    task.tiles_c = (cols + tile_cols - 1) / tile_cols;
    task.tiles = task.segments * task.tiles_r * task.tiles_c;
    task.chunk = chunk;
    task.reg_elems = reg_elems;
    if (task.tiles > 0x7fffffff)
      return make_status(StatusCode::kUnsupported, "kernel ", k.name, ": ", task.tiles,
                         " tiles are more than the megakernel's counters hold");
    smem = std::max<int64_t>(smem, int64_t{k.registers} * reg_elems);
  }

  // Waits: task t waits for an earlier task u (with tiles) when one writes memory the other
  // reads or writes. Memory is compared by the byte ranges of whole tensors, so arena slots
  // shared by two intermediates count. A wait implied by another (u reached through a task
  // that t already waits for) is left out.
  struct Range {
    uintptr_t lo, hi;
  };
  auto range_of = [&](uint32_t tensor) {
    const TensorView& v = views[tensor];
    const auto lo = reinterpret_cast<uintptr_t>(v.data);
    return Range{lo, lo + v.bytes()};
  };
  auto touches = [&](size_t task, bool writes_only, std::vector<Range>* out) {
    const uint32_t ki = dp.task_kernels[task];
    const MkKernel& mk = dp.kernels[ki];
    for (uint32_t m : dp.writes[ki]) out->push_back(range_of(dp.maps[mk.map_begin + m].tensor));
    if (!writes_only)
      for (uint32_t m : dp.reads[ki]) out->push_back(range_of(dp.maps[mk.map_begin + m].tensor));
  };
  auto overlap = [](const std::vector<Range>& a, const std::vector<Range>& b) {
    for (const Range& x : a)
      for (const Range& y : b)
        if (x.lo < y.hi && y.lo < x.hi && x.lo < x.hi && y.lo < y.hi) return true;
    return false;
  };
  std::vector<std::vector<Range>> all(ntasks), written(ntasks);
  for (size_t t = 0; t < ntasks; ++t) {
    touches(t, false, &all[t]);
    touches(t, true, &written[t]);
  }
  std::vector<std::vector<bool>> reach(ntasks, std::vector<bool>(ntasks, false));
  for (size_t t = 0; t < ntasks; ++t) {
    MkTask& task = run.tasks[t];
    task.wait_begin = static_cast<mk_u32>(run.waits.size());
    if (task.tiles == 0) continue;
    for (size_t u = t; u-- > 0;) {
      if (run.tasks[u].tiles == 0 || reach[t][u]) continue;
      if (!overlap(written[u], all[t]) && !overlap(all[u], written[t])) continue;
      run.waits.push_back(MkWait{static_cast<mk_u32>(u), static_cast<mk_u32>(run.tasks[u].tiles)});
      reach[t][u] = true;
      for (size_t x = 0; x < u; ++x)
        if (reach[u][x]) reach[t][x] = true;
    }
    task.wait_count = static_cast<mk_u32>(run.waits.size()) - task.wait_begin;
  }
  int64_t ticket = 0;
  for (MkTask& task : run.tasks) {
    task.first_ticket = ticket;
    ticket += task.tiles;
  }
  run.total_tickets = ticket;
  run.counters.assign(ntasks, 0);
  run.smem_floats = static_cast<mk_u32>(MK_HEADER_FLOATS + smem);
  *out = std::move(run);
  return Status::ok();
}

Status status_from_device(const DeviceProgram& dp, const DeviceRun& run) {
  if (run.status == MK_OK) return Status::ok();
  std::string where = "the megakernel";
  if (run.status_task < run.tasks.size())
    where = "kernel " + dp.kernel_names[dp.task_kernels[run.status_task]] + " (task " +
            std::to_string(run.status_task) + ")";
  switch (run.status) {
    case MK_CANCELLED:
      return make_status(StatusCode::kCancelled, "run stopped in or before ", where, " on the device");
    case MK_BAD_INSN:
      return make_status(StatusCode::kInvalidPackage, "malformed tile instruction in ", where);
    case MK_INJECTED:
      return make_status(StatusCode::kRuntime, "injected device failure in ", where);
    default:
      return make_status(StatusCode::kRuntime, "unknown device status ", run.status, " in ", where);
  }
}

}  // namespace cuvil::rt::gpu
