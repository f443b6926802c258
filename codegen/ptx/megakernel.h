// The PTX megakernel (docs/ptx.md). Its source is codegen/ptx/megakernel.inc over the
// portability layer codegen/ptx/megakernel_port.h and the plain data of
// codegen/ptx/megakernel_abi.h; megakernel_device.cu is its GPU entry point (clang-19 turns it
// into PTX at build time) and megakernel_host.cpp builds the same source for the host, where
// the grid emulator (runtime/gpu/grid_emulator.h) runs one block per std::thread group.
#pragma once

#include "codegen/ptx/megakernel_port.h"

namespace mk {

// Host build: runs one block of the megakernel on the calling thread as thread c.tid of the
// block (the emulator calls it from each of the block's threads).
void run_block_host(const Ctx& c, const MkParams& p);

// Host build of the GPU's double-precision replacements for the C library's functions
// (megakernel.inc MK_DEVICE_MATH), so tests can hold them to a tolerance here.
float device_math_log(float x);
float device_math_sin(float x);
float device_math_cos(float x);
float device_math_pow(float a, float b);
float device_math_softplus(float x);

}  // namespace mk
