// Packed GEMM operands cached per weight: a loaded package registers its WEIGHTS section
// (runtime/package.cpp), and the float32 GEMM (gemm_kernels.cpp) packs a b operand that lies
// in a registered section into its micro kernel's panels once, on first use, then reuses the
// panels for every later call, from any session and thread of that package. The package
// format is unchanged (packing at load time keeps packages portable across kernel paths);
// the panels go when the package is unloaded. Thread-safe; the bytes held are counted and
// capped (a product whose panels would pass the cap packs per call, as before).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cuvil::rt::ops {

// A packed form's storage, allocated once and never resized. The elements start
// uninitialised unless `zeroed` (the float panels' packing writes every element, padding
// included; a memset first would cost as much as the packing). A buffer of 2 MiB or more
// starts on a 2 MiB boundary and asks for transparent huge pages (madvise where the system
// has it): a large weight's panels are then read through a few TLB entries instead of one per
// 4 KiB page, and made with one page fault per 2 MiB when the session is created.
class PackedWeightBuffer {
 public:
  static constexpr size_t kHugePageBytes = size_t(2) << 20;
  PackedWeightBuffer(size_t floats, bool zeroed);
  ~PackedWeightBuffer();
  PackedWeightBuffer(const PackedWeightBuffer&) = delete;
  PackedWeightBuffer& operator=(const PackedWeightBuffer&) = delete;
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return floats_; }

 private:
  float* data_ = nullptr;
  size_t floats_ = 0;
};
using PackedWeights = std::shared_ptr<const PackedWeightBuffer>;

// [data, data + size) holds read-only weights until unregister_weight_region(data).
void register_weight_region(const void* data, size_t size);
// Drops the region and the panels packed from it (callers still using panels keep them alive).
void unregister_weight_region(const void* data);

// What a packed operand is: op(b) (k x n) starting at b with row stride ldb, transposed or
// not, in panels of nr columns (panels[n / nr][k][nr], zero-padded past column n).
struct PackedPanelsKey {
  const float* b;
  bool trans_b;
  int64_t k, n, ldb, nr;
};

// The panels for `key` when b lies wholly inside a registered region: packed by `pack` into
// the returned buffer on the first call (concurrent callers wait for it), shared afterwards.
// nullptr when b is not a registered weight or the cache is full: pack per call then.
using PackPanelsFn = void (*)(const PackedPanelsKey& key, float* out, void* arg);
PackedWeights packed_weight_panels(const PackedPanelsKey& key, PackPanelsFn pack, void* arg);

// Another packed form of a weight (the int8 GEMM's panels, gemm_int8.cpp), cached, capped and
// dropped like the float panels: `form` (> 0, one per layout) with k, n, ldb and trans names
// the form; span_bytes are the weight bytes it reads from `data` on; the buffer holds `bytes`
// (rounded up to whole floats, zeroed first), filled by pack(out, arg) once. nullptr as above.
using PackBytesFn = void (*)(void* out, void* arg);
PackedWeights packed_weight_form(const void* data, size_t span_bytes, int64_t form, bool trans,
                                 int64_t k, int64_t n, int64_t ldb, size_t bytes, PackBytesFn pack,
                                 void* arg);

// Bytes of packed panels held now (memory accounting; tests and `--bench` reports).
size_t packed_weight_bytes();
// The cap (default 4 GiB); tests lower it.
void set_packed_weight_cap_for_testing(size_t bytes);

}  // namespace cuvil::rt::ops
