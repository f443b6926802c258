// The channels-last pooling kernels of pool_nhwc.h, written once over a vector trait T and
// included by each path's file inside its own anonymous namespace (portable: pool_nhwc.cpp;
// pool_nhwc_avx2.cpp; pool_nhwc_avx512.cpp). Uses no library header (see pool_nhwc_args.h).
//
// Trait T: type V of kWidth floats; set(f); load/store (kWidth floats); load_n/store_n (the
// first n < kWidth lanes, the others read as 0 and not written); max_keep(v, best) =
// v > best ? v : best; global_max(v, acc) = v > acc || v != v ? v : acc; type A holding kWidth
// doubles with a_zero(), a_add(acc, v) = acc + double(v) lane by lane, and a_div(acc, d) =
// float(acc / d) rounded to nearest. The paths differ only in width: every lane computes what
// the NCHW kernel computes for its element, in the same order, so all paths give the same bits.

template <class T> struct PoolNhwcKernels {
  using V = typename T::V;
  using A = typename T::A;
  static constexpr int64_t kW = T::kWidth;

  // U vectors of channels from channel c (Partial: one vector of its first n lanes).
  template <int U, bool Partial> static inline void channels(const PoolNhwcArgs& a, int64_t c, int64_t n) {
    const float* x = a.x + c;
    float* y = a.y + c;
    auto load = [n](const float* p) {
      if constexpr (Partial) return T::load_n(p, n);
      else return T::load(p);
    };
    auto store = [n](float* p, V v) {
      if constexpr (Partial) T::store_n(p, v, n);
      else T::store(p, v);
    };
    switch (a.kind) {
      case PoolNhwcKind::Max: {
        if (a.ntaps == 0) {
          for (int u = 0; u < U; ++u) store(y + u * kW, T::set(-3.40282346638528859812e+38f));  // lowest()
          return;
        }
        V best[U];
        for (int u = 0; u < U; ++u) best[u] = load(x + a.off[0] + u * kW);
        for (int64_t k = 1; k < a.ntaps; ++k) {
          const float* p = x + a.off[k];
          for (int u = 0; u < U; ++u) best[u] = T::max_keep(load(p + u * kW), best[u]);
        }
        for (int u = 0; u < U; ++u) store(y + u * kW, best[u]);
        return;
      }
      case PoolNhwcKind::GlobalMax: {
        V acc[U];
        for (int u = 0; u < U; ++u) acc[u] = T::set(-__builtin_inff());
        for (int64_t k = 0; k < a.ntaps; ++k) {
          const float* p = x + a.off[k];
          for (int u = 0; u < U; ++u) acc[u] = T::global_max(load(p + u * kW), acc[u]);
        }
        for (int u = 0; u < U; ++u) store(y + u * kW, acc[u]);
        return;
      }
      case PoolNhwcKind::Average: {
        if (!(a.denom > 0.0)) {
          for (int u = 0; u < U; ++u) store(y + u * kW, T::set(0.f));
          return;
        }
        A acc[U];
        for (int u = 0; u < U; ++u) acc[u] = T::a_zero();
        for (int64_t k = 0; k < a.ntaps; ++k) {
          const float* p = x + a.off[k];
          for (int u = 0; u < U; ++u) acc[u] = T::a_add(acc[u], load(p + u * kW));
        }
        for (int u = 0; u < U; ++u) store(y + u * kW, T::a_div(acc[u], a.denom));
        return;
      }
    }
  }

  // Four vectors at a time (independent chains for the pipelines), then one, then the rest.
  static void position(const PoolNhwcArgs& a) {
    int64_t c = 0;
    for (; c + 4 * kW <= a.channels; c += 4 * kW) channels<4, false>(a, c, kW);
    for (; c + kW <= a.channels; c += kW) channels<1, false>(a, c, kW);
    if (c < a.channels) channels<1, true>(a, c, a.channels - c);
  }
};
