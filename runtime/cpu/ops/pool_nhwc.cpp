// pool_nhwc.h: the portable path's trait (4-lane GCC vectors, double sums in two 2-lane double
// vectors) and the dispatch to the AVX2 and AVX-512 paths.
#include "runtime/cpu/ops/pool_nhwc.h"

#include "runtime/cpu/ops/portable_vec4.h"

namespace cuvil::rt::ops {
namespace pool_portable {
namespace {

typedef float V2 __attribute__((vector_size(8)));
typedef double D2 __attribute__((vector_size(16)));

struct Portable : PortableV4Memory {
  struct A {  // two 2-lane halves: a 32-byte vector would change the baseline x86-64 ABI
    D2 lo, hi;
  };
  static V max_keep(V v, V best) { return v > best ? v : best; }
  static V global_max(V v, V acc) { return (v > acc) | (v != v) ? v : acc; }
  static A a_zero() { return A{D2{0.0, 0.0}, D2{0.0, 0.0}}; }
  static A a_add(A acc, V v) {
    return A{acc.lo + __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1), D2),
             acc.hi + __builtin_convertvector(__builtin_shufflevector(v, v, 2, 3), D2)};
  }
  static V a_div(A acc, double d) {
    const V2 lo = __builtin_convertvector(acc.lo / D2{d, d}, V2), hi = __builtin_convertvector(acc.hi / D2{d, d}, V2);
    return V(__builtin_shufflevector(lo, hi, 0, 1, 2, 3));
  }
};

#include "runtime/cpu/ops/pool_nhwc_impl.h"

}  // namespace

CUVIL_POOL_NHWC_DEFINE_ENTRY_POINTS(Portable)

}  // namespace pool_portable

#if defined(__x86_64__)
namespace pool_avx2 {
CUVIL_POOL_NHWC_PATH_ENTRY_POINTS
}
namespace pool_avx512 {
CUVIL_POOL_NHWC_PATH_ENTRY_POINTS
}
#endif

void pool_nhwc_position(CpuPath path, const PoolNhwcArgs& a) {
  switch (path) {
#if defined(__x86_64__)
    case CpuPath::Avx512: return pool_avx512::pool_position(a);
    case CpuPath::Avx2: return pool_avx2::pool_position(a);
#endif
    default: return pool_portable::pool_position(a);
  }
}

}  // namespace cuvil::rt::ops
