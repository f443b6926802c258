// The plain data the PTX megakernel reads (docs/ptx.md): the device form of a program (kernels,
// tile bodies, access maps, all by expression id) and of one run (the bound expression values,
// tensor addresses, the task list with its waits, the counters, the ticket and the status
// word). Header-free on purpose: the same file is read by clang as CUDA device code
// (codegen/ptx/megakernel_device.cu) and by the host compiler (runtime/gpu/, the grid emulator),
// so it uses only built-in types whose sizes agree on both (x86-64 and NVPTX64: long long is
// 64-bit, pointers are 64-bit) and no std::.
#pragma once

typedef unsigned int mk_u32;
typedef long long mk_i64;
typedef unsigned long long mk_u64;

#define MK_MAX_RANK 8u        // domain rank the device form accepts
#define MK_NONE 0xffffffffu   // no expression / no map (runtime/program.h kNone)
#define MK_HEADER_FLOATS 16u  // shared-memory header before the register file (ticket, task)

// Device status codes (the status word). The host turns them into cuvil StatusCodes
// (runtime/gpu/device_program.cpp, status_from_device). First error wins (CAS from MK_OK).
#define MK_OK 0u
#define MK_CANCELLED 1u     // the host's stop word was set (cancel or deadline)
#define MK_BAD_INSN 2u      // an opcode or operand the verifier should have refused
#define MK_INJECTED 3u      // tests: MkRun::fail_task made a task fail

struct MkMap {
  mk_u32 tensor;       // index into MkRun::tensors
  mk_u32 offset;       // expression id: element offset of domain index 0
  mk_u32 loop_stride;  // expression id, or MK_NONE (does not move with the loop)
  mk_u32 rank;
  mk_u32 strides[MK_MAX_RANK];  // expression ids, one per domain dim
};

struct MkKernel {
  mk_u32 body_begin, body_end;  // words of MkProgram::body
  mk_u32 init_end, loop_end;    // section bounds, absolute word positions
  mk_u32 map_begin, map_count;  // MkProgram::maps
  mk_u32 registers;             // tile registers the body uses
  mk_u32 has_loop;
};

struct MkTensor {
  char* data;
  mk_i64 numel;
  mk_u32 dtype;  // ONNX TensorProto.DataType code
  mk_u32 pad;
};

// One RunKernel of the program with its bound geometry (the host computes it at bind time,
// runtime/gpu/device_program.cpp, with the CPU interpreter's tiling rules at the device's
// register size).
struct MkTask {
  mk_u32 kernel;
  mk_u32 wait_begin, wait_count;  // MkRun::waits
  mk_u32 rank;
  mk_i64 first_ticket, tiles;     // tickets [first_ticket, first_ticket + tiles)
  mk_i64 cols, seg_rows, segments, tile_rows, tile_cols, tiles_r, tiles_c;
  mk_i64 loop_extent, chunk;      // chunk: loop steps per chunk (1 without a loop)
  mk_i64 reg_elems;               // floats per tile register in shared memory
  mk_i64 dims[MK_MAX_RANK];
};

// A task may start a tile only when counters[task] >= target for each of its waits.
struct MkWait {
  mk_u32 task;
  mk_u32 target;
};

struct MkParams {
  // Program (built once per loaded program).
  const MkKernel* kernels;
  const mk_u32* body;
  const MkMap* maps;
  // Run (bound once per run).
  const mk_i64* values;  // every expression of the program, evaluated
  const MkTensor* tensors;
  const MkTask* tasks;
  const MkWait* waits;
  mk_u32* counters;      // per task: tiles completed
  mk_u64* ticket;        // next ticket
  mk_u32* status;        // MK_OK or the first error
  mk_u32* status_task;   // the task that set the status
  const mk_u32* stop;    // nonzero: stop taking tiles (host: cancel / deadline)
  mk_i64 total_tickets;
  mk_u32 num_tasks;
  mk_u32 smem_floats;    // shared memory per block, in floats (header + register file)
  mk_u32 fail_task;      // tests: the task whose first tile fails with MK_INJECTED, or MK_NONE
  mk_u32 pad;
};
