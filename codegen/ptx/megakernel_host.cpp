// The megakernel's source built as host C++ (codegen/ptx/megakernel.h): run_block_host for the
// grid emulator, and, in a second namespace, the GPU's replacements of the C library's maths
// for tests. Built with -ffp-contract=off (CMakeLists.txt) like the CPU's vec_math.
#include "codegen/ptx/megakernel.h"

#include <thread>

void mk_host_yield() { std::this_thread::yield(); }

#include "codegen/ptx/megakernel.inc"

namespace mk {
void run_block_host(const Ctx& c, const MkParams& p) { megakernel_block(c, p); }
}  // namespace mk

// The device maths on the host: megakernel.inc again with MK_DEVICE_MATH in another namespace.
#undef MK_DEVICE_MATH
#define MK_DEVICE_MATH 1
#undef MK_MATH_ONLY
#define MK_MATH_ONLY 1
#define mk mk_devmath
#include "codegen/ptx/megakernel.inc"
#undef mk

namespace mk {
float device_math_log(float x) { return mk_devmath::mk_logf(x); }
float device_math_sin(float x) { return mk_devmath::mk_sinf(x); }
float device_math_cos(float x) { return mk_devmath::mk_cosf(x); }
float device_math_pow(float a, float b) { return mk_devmath::mk_powf(a, b); }
float device_math_softplus(float x) { return mk_devmath::mk_softplusf(x); }
}  // namespace mk
