// conv_igemm.h: the driver (weight panels, task split, indirection buffers) and the dispatch to
// the per-path tile kernels (conv_igemm_impl.h, instantiated in the conv_depthwise*.cpp files
// with their vector traits).
#include "runtime/cpu/ops/conv_igemm.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/conv_igemm_args.h"
#include "runtime/cpu/ops/conv_taps.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/packed_weights.h"

namespace cuvil::rt::ops {
namespace dw_portable {
CUVIL_IGEMM_PATH_ENTRY_POINTS
}
#if defined(__x86_64__)
namespace dw_avx2 {
CUVIL_IGEMM_PATH_ENTRY_POINTS
}
namespace dw_avx512 {
CUVIL_IGEMM_PATH_ENTRY_POINTS
}
#endif

namespace {

// kd: the depth block, so that a panel's kd x nr floats of weights take about 16 KiB of L1.
struct IgemmPath {
  int64_t mr, nr, kd;
  void (*tiles)(const IgemmArgs&);
};

IgemmPath igemm_path() {
  switch (active_cpu_path()) {
#if defined(__x86_64__)
    case CpuPath::Avx512: return {igemm_rows(16), 32, 256, dw_avx512::igemm_tiles};
    case CpuPath::Avx2: return {igemm_rows(8), 16, 256, dw_avx2::igemm_tiles};
#endif
    default: return {igemm_rows(4), 8, 512, dw_portable::igemm_tiles};
  }
}

// Input channels below which a window row's taps are read as one run (see merge_w).
constexpr int64_t kMergeRowsBelowChannels = 16;
// Output positions per task block: the block's input rows and indirection stay in L2 while
// every weight panel of the task passes over them.
constexpr int64_t kBlockRows = 96;
// packed_weight_form's form id of these panels (its other users: the int8 GEMM, 1 .. 8).
constexpr int64_t kIgemmWeightForm = 64;

struct WeightPackArgs {
  const float* w;
  int64_t m, c, taps, nr;
};

// w [m][c][taps] as panels [ceil(m / nr)][taps * c][nr], zero past channel m.
void pack_igemm_weights(void* out, void* arg) {
  const WeightPackArgs& a = *static_cast<const WeightPackArgs*>(arg);
  float* dst = static_cast<float*>(out);
  const int64_t panels = (a.m + a.nr - 1) / a.nr;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t t = 0; t < a.taps; ++t)
      for (int64_t ch = 0; ch < a.c; ++ch, dst += a.nr)
        for (int64_t j = 0; j < a.nr; ++j) {
          const int64_t mm = p * a.nr + j;
          dst[j] = mm < a.m ? a.w[(mm * a.c + ch) * a.taps + t] : 0.f;
        }
}

}  // namespace

bool conv_igemm_applies(const DwShape& s, bool channels_last) {
  return channels_last && s.group == 1 && s.c > 0 && s.m > 0;
}

void conv_igemm_float(OpContext& ctx, const DwShape& s, const float* x, const float* w, const float* bias,
                      const DwEpilogue& e, float* y) {
  if (s.n * s.out_h * s.out_w == 0) return;  // no output position: nothing to write
  const IgemmPath path = igemm_path();
  const int64_t nr = path.nr;
  const int64_t taps = s.k_h * s.k_w, depth = taps * s.c;
  const int64_t panels = (s.m + nr - 1) / nr, panel_stride = depth * nr;
  const size_t pack_bytes = static_cast<size_t>(panels * panel_stride) * sizeof(float);
  WeightPackArgs pack{w, s.m, s.c, taps, nr};
  // A weight of a loaded package is packed once and shared; anything else per call.
  PackedWeights cached =
      packed_weight_form(w, static_cast<size_t>(s.m * depth) * sizeof(float), kIgemmWeightForm, false, depth, s.m,
                         nr, pack_bytes, pack_igemm_weights, &pack);
  std::vector<float> local;
  if (!cached) {
    local.resize(static_cast<size_t>(panels * panel_stride));
    pack_igemm_weights(local.data(), &pack);
  }
  const float* bpack = cached ? cached->data() : local.data();

  const int64_t pout = s.out_h * s.out_w, rows = s.n * pout;
  // Groups of at most the path's rows, evened out: 49 positions (a 7x7 map) are 7 groups of 7
  // rather than 7 of 8 with 7 rows of padding.
  const int64_t groups = (rows + path.mr - 1) / path.mr, mr = (rows + groups - 1) / groups;
  const int64_t block_groups = std::max<int64_t>(1, kBlockRows / mr);
  const int64_t blocks = (groups + block_groups - 1) / block_groups;
  // Enough tasks for balance on a loaded machine: with few row blocks the panels split too.
  const int threads = ctx.threads();
  int64_t chunks = 1;
  if (threads > 1 && blocks < 4 * threads) chunks = std::min<int64_t>(panels, (4 * threads + blocks - 1) / blocks);
  const int64_t panels_per_chunk = (panels + chunks - 1) / chunks;
  // With few input channels, the taps of a window row (dilation 1 along it) are one run of
  // k_w * c floats in the input: the kernel reads them as one tap of that many channels (the
  // same depth order, so the same sums), reloading its row pointers once per window row
  // instead of once per c multiply-adds. A run that crosses the input's left or right edge is
  // copied with its padding zeros into `edge`.
  const bool merge_w = s.d_w == 1 && s.k_w > 1 && s.c < kMergeRowsBelowChannels;
  const int64_t ntaps = merge_w ? s.k_h : taps, kc = merge_w ? s.k_w * s.c : s.c;
  const std::vector<float> zeros(static_cast<size_t>(kc), 0.f);
  const int64_t in_img = s.in_h * s.in_w * s.c;
  const bool pointwise = taps == 1 && s.s_h == 1 && s.s_w == 1 && s.p_h == 0 && s.p_w == 0 && s.in_h == s.out_h &&
                         s.in_w == s.out_w;

  const int64_t kd = std::min(depth, path.kd);
  parallel_range(ctx, blocks * chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<const float*> ind(static_cast<size_t>(block_groups * ntaps * mr));
    std::vector<float> edge(merge_w ? static_cast<size_t>(block_groups * mr * ntaps * kc) : 0);
    std::vector<float> partial(kd < depth ? static_cast<size_t>(panels_per_chunk * block_groups * mr * nr) : 0);
    int64_t built = -1;  // the block whose pointers ind holds
    for (int64_t task = begin; task < end; ++task) {
      const int64_t block = task / chunks, chunk = task % chunks;
      const int64_t g0 = block * block_groups, g1 = std::min(groups, g0 + block_groups);
      if (built != block) {
        // Output positions in order, their (image, oh, ow) stepped along rather than divided
        // out; a 1x1 window without padding or stride points straight at the position.
        const int64_t first = g0 * mr;
        int64_t n = first / pout, oh = first % pout / s.out_w, ow = first % s.out_w;
        float* next_edge = edge.data();
        for (int64_t g = g0; g < g1; ++g)
          for (int64_t r = 0; r < mr; ++r) {
            const int64_t row = g * mr + r;
            const float** dst = ind.data() + (g - g0) * ntaps * mr + r;
            if (row >= rows) {
              for (int64_t t = 0; t < ntaps; ++t) dst[t * mr] = zeros.data();
              continue;
            }
            if (merge_w) {
              const float* img = x + n * in_img;
              const int64_t iw0 = ow * s.s_w - s.p_w;
              for (int64_t kh = 0; kh < s.k_h; ++kh) {
                const int64_t ih = oh * s.s_h - s.p_h + kh * s.d_h;
                const float* run = zeros.data();
                if (ih < 0 || ih >= s.in_h) {
                  // a window row in the padding reads zeros
                } else if (iw0 >= 0 && iw0 + s.k_w <= s.in_w) {
                  run = img + (ih * s.in_w + iw0) * s.c;
                } else {
                  for (int64_t kw = 0; kw < s.k_w; ++kw) {
                    const int64_t iw = iw0 + kw;
                    float* to = next_edge + kw * s.c;
                    if (iw >= 0 && iw < s.in_w) std::copy_n(img + (ih * s.in_w + iw) * s.c, s.c, to);
                    else std::fill_n(to, s.c, 0.f);
                  }
                  run = next_edge;
                  next_edge += kc;
                }
                dst[kh * mr] = run;
              }
            } else if (pointwise) {
              dst[0] = x + row * s.c;
            } else {
              point_taps(s, oh, ow, x + n * in_img, s.c, zeros.data(), dst, mr);
            }
            if (++ow == s.out_w) {
              ow = 0;
              if (++oh == s.out_h) oh = 0, ++n;
            }
          }
        built = block;
      }
      IgemmArgs a;
      a.ind = ind.data();
      a.ntaps = ntaps;
      a.kc = kc;
      a.b = bpack;
      a.panel_stride = panel_stride;
      a.g0 = g0;
      a.g1 = g1;
      a.p0 = chunk * panels_per_chunk;
      a.p1 = std::min(panels, a.p0 + panels_per_chunk);
      a.rows = rows;
      a.n = s.m;
      a.y = y;
      a.ldy = s.m;
      a.bias = bias;
      a.residual = e.residual;
      a.e = &e;
      a.mr = mr;
      a.kd = kd;
      a.partial = partial.data();
      if (a.p0 < a.p1) path.tiles(a);
    }
  });
}

}  // namespace cuvil::rt::ops
