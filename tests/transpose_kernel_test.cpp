// Transpose (runtime/cpu/ops/movement.cpp) against an index-by-index reference written here:
// permutations that are batched matrix transposes (NCHW <-> NHWC of any rank, [a, b] -> [b, a],
// with axes of one element anywhere and neighbouring axes that move together) take the
// blocked path, the others the strided copy; both must give the reference's elements exactly,
// for element sizes of 1, 2, 4 and 8 bytes, extents around the 32-element block, and with the
// work split into several chunks (suite TransposeKernel).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

#include "kernel_harness.h"

using namespace cuvil;

namespace {

using cuvil::testing::ChunkedContext;

template <typename E> void check(DType dtype, std::vector<int64_t> dims, std::vector<int64_t> perm, int chunks) {
  SCOPED_TRACE(::testing::Message() << "dims " << ::testing::PrintToString(dims) << " perm "
                                    << ::testing::PrintToString(perm) << " element bytes " << sizeof(E)
                                    << " chunks " << chunks);
  const int64_t n = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<int64_t>());
  std::vector<E> x(static_cast<size_t>(n));
  std::mt19937_64 gen(static_cast<uint64_t>(n) * 31 + perm.size());
  for (E& v : x) v = static_cast<E>(gen());
  rt::TensorView xv;
  xv.dtype = dtype;
  xv.dims = dims;
  xv.data = x.data();
  Node node;
  node.op_type = "Transpose";
  node.opset = 13;
  node.name = "t";
  node.outputs = {0};
  Attribute p;
  p.kind = Attribute::Kind::Ints;
  p.ints = perm;
  node.attrs["perm"] = p;
  ChunkedContext ctx(node, {&xv}, chunks);
  rt::OpKernelFn fn = rt::find_op_kernel("", "Transpose");
  ASSERT_NE(fn, nullptr);
  const rt::Status st = fn(ctx);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const rt::TensorView& y = ctx.output(0);
  const size_t r = dims.size();
  std::vector<int64_t> ydims(r), xstride(r, 1);
  for (size_t i = 0; i < r; ++i) ydims[i] = dims[static_cast<size_t>(perm[i])];
  ASSERT_EQ(y.dims, ydims);
  for (size_t i = r - 1; i-- > 0;) xstride[i] = xstride[i + 1] * dims[i + 1];
  const E* yp = static_cast<const E*>(y.data);
  std::vector<int64_t> idx(r, 0);  // output multi-index
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t src = 0;
    for (size_t i = 0; i < r; ++i) src += idx[i] * xstride[static_cast<size_t>(perm[i])];
    ASSERT_EQ(yp[flat], x[static_cast<size_t>(src)]) << "output element " << flat;
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < ydims[i]) break;
      idx[i] = 0;
    }
  }
}

template <typename E> void check_all(DType dtype) {
  for (int chunks : {1, 3}) {
    check<E>(dtype, {1, 3, 7, 9}, {0, 2, 3, 1}, chunks);     // NCHW -> NHWC, three channels
    check<E>(dtype, {2, 33, 5, 7}, {0, 2, 3, 1}, chunks);    // a batch, channels past a block
    check<E>(dtype, {2, 5, 7, 65}, {0, 3, 1, 2}, chunks);    // NHWC -> NCHW
    check<E>(dtype, {3, 40, 31}, {0, 2, 1}, chunks);         // 1-D spatial
    check<E>(dtype, {2, 4, 3, 5, 6}, {0, 2, 3, 4, 1}, chunks);  // 3-D spatial
    check<E>(dtype, {64, 33}, {1, 0}, chunks);               // a matrix
    check<E>(dtype, {1, 64, 1, 1}, {0, 2, 3, 1}, chunks);    // only ones around the channels
    check<E>(dtype, {5, 1, 6}, {2, 1, 0}, chunks);           // an axis of one between the two
    check<E>(dtype, {2, 3, 4, 5}, {0, 2, 1, 3}, chunks);     // not a matrix transpose (heads)
    check<E>(dtype, {2, 3, 4, 5}, {3, 2, 1, 0}, chunks);     // reversed: strided copy
    check<E>(dtype, {2, 3, 4}, {0, 1, 2}, chunks);           // identity
    check<E>(dtype, {0, 3, 4}, {0, 2, 1}, chunks);           // empty
  }
}

TEST(TransposeKernel, BlockedMatrixPathAndStridedCopyEqualTheReference) {
  check_all<uint8_t>(DType::UInt8);
  check_all<uint16_t>(DType::Float16);
  check_all<uint32_t>(DType::Float);
  check_all<uint64_t>(DType::Int64);
}

}  // namespace
