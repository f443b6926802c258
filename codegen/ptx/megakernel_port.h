// The thin portability layer under the megakernel (codegen/ptx/megakernel.inc): everything
// that differs between the GPU and the host grid emulator is here and nowhere else. On the GPU
// (clang -x cuda --cuda-device-only -nocudainc, no CUDA headers) thread ids, barriers and
// nanosleep are __nvvm builtins and the acquire/release operations are inline PTX
// (ld.acquire.gpu, red.release.gpu: LLVM 19 miscompiles acquire atomics for NVPTX, DESIGN.md).
// On the host a block is run by `threads` std::threads sharing a per-block buffer and a
// barrier (runtime/gpu/grid_emulator.cpp), and the same operations are GCC __atomic builtins,
// which ThreadSanitizer understands.
#pragma once

#include "codegen/ptx/megakernel_abi.h"

#if defined(__CUDA_ARCH__)
#define MK_DEVICE 1
#define MK_FN __attribute__((device))
#define MK_NOINLINE __attribute__((device, noinline))
#define MK_GLOBAL extern "C" __attribute__((global))
#define MK_SHARED __attribute__((shared))
#else
#define MK_DEVICE 0
#define MK_FN
#define MK_NOINLINE __attribute__((noinline))
#endif

#if !MK_DEVICE
void mk_host_yield();  // std::this_thread::yield (runtime/gpu/grid_emulator.cpp)
#endif

namespace mk {

// What a thread knows about where it runs. On the GPU it is filled from the special
// registers; on the host by the emulator, with `barrier` the block's std::barrier.
struct Ctx {
  mk_u32 tid, threads;  // thread in block, threads per block
  mk_u32 block, blocks;
  float* smem;          // the block's shared memory (MkParams::smem_floats floats)
#if !MK_DEVICE
  void (*barrier)(void*);
  void* barrier_arg;
  // Tests: called by thread 0 before each tile it runs (random delays in the stress test).
  void (*tile_hook)(void*, mk_u32 task, mk_i64 tile);
  void* tile_hook_arg;
#endif
};

MK_FN inline void sync(const Ctx& c) {
#if MK_DEVICE
  __syncthreads();
#else
  if (c.threads > 1) c.barrier(c.barrier_arg);
#endif
}

// Acquire load of a counter written by other blocks.
MK_FN inline mk_u32 load_acquire(const mk_u32* p) {
#if MK_DEVICE
  mk_u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

MK_FN inline mk_u32 load_relaxed(const mk_u32* p) {
#if MK_DEVICE
  return *(const volatile mk_u32*)p;
#else
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

MK_FN inline void store_relaxed(mk_u32* p, mk_u32 v) {
#if MK_DEVICE
  *(volatile mk_u32*)p = v;
#else
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

// counter += v with release semantics: the block's writes (ordered before by the barrier and
// the fence) are visible to whoever acquires the new value.
MK_FN inline void add_release(mk_u32* p, mk_u32 v) {
#if MK_DEVICE
  __nvvm_membar_gl();
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
#else
  __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
#endif
}

MK_FN inline mk_u64 fetch_add_ticket(mk_u64* p) {
#if MK_DEVICE
  return __nvvm_atom_add_gen_ll((long long*)p, 1);
#else
  return __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
#endif
}

// First error wins.
MK_FN inline bool cas_status(mk_u32* p, mk_u32 value) {
#if MK_DEVICE
  return __nvvm_atom_cas_gen_i((int*)p, 0, (int)value) == 0;
#else
  mk_u32 expected = MK_OK;
  return __atomic_compare_exchange_n(p, &expected, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
#endif
}

MK_FN inline void relax(mk_u32 spins) {
#if MK_DEVICE
  __nvvm_nanosleep(spins < 8 ? 32u : 256u);
#else
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
  if (spins > 64) mk_host_yield();
#endif
}

}  // namespace mk
