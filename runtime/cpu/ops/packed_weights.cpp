// The per-weight packed panel cache (packed_weights.h): one mutex-guarded table of registered
// weight regions, each with its packed entries; an entry is packed exactly once (call_once)
// outside the table lock, so a long pack never blocks lookups of other weights.
#include "runtime/cpu/ops/packed_weights.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <tuple>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace cuvil::rt::ops {
namespace {

struct Entry {
  size_t bytes = 0;  // reserved against the cap when the entry was made
  std::once_flag once;
  std::shared_ptr<PackedWeightBuffer> panels;
};

using EntryKey = std::tuple<const float*, bool, int64_t, int64_t, int64_t, int64_t>;

struct Region {
  size_t size = 0;
  std::map<EntryKey, std::shared_ptr<Entry>> entries;
};

struct Cache {
  std::mutex mu;
  std::map<const uint8_t*, Region> regions;  // by start address
  std::atomic<size_t> bytes{0};
  std::atomic<size_t> cap{size_t(4) << 30};
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: packages may unload during static teardown
  return *c;
}

// The bytes op(b) spans in b's storage.
size_t span_bytes(const PackedPanelsKey& key) {
  const int64_t rows = key.trans_b ? key.n : key.k, cols = key.trans_b ? key.k : key.n;
  return static_cast<size_t>(((rows - 1) * key.ldb + cols) * static_cast<int64_t>(sizeof(float)));
}

}  // namespace

PackedWeightBuffer::PackedWeightBuffer(size_t floats, bool zeroed) : floats_(floats) {
  const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : alignof(std::max_align_t);
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes) != 0) throw std::bad_alloc();  // as allocating a vector does
  data_ = static_cast<float*>(p);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Before the first touch, so that the faults take huge pages; a refusal only costs speed.
  // Whole huge pages only: the tail stays on small pages, so no buffer holds more than its
  // bytes plus a small page.
  if (align == kHugePageBytes) madvise(data_, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
#endif
  if (zeroed) std::memset(data_, 0, bytes);
}

PackedWeightBuffer::~PackedWeightBuffer() { std::free(data_); }

void register_weight_region(const void* data, size_t size) {
  if (!data || size == 0) return;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.regions[static_cast<const uint8_t*>(data)].size = size;
}

void unregister_weight_region(const void* data) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.regions.find(static_cast<const uint8_t*>(data));
  if (it == c.regions.end()) return;
  for (auto& [key, entry] : it->second.entries) c.bytes -= entry->bytes;
  c.regions.erase(it);
}

namespace {

// The entry for `ekey` when [begin, begin + span) lies wholly inside a registered region,
// made (with `need` bytes reserved) on first use; nullptr otherwise.
std::shared_ptr<Entry> find_entry(const uint8_t* begin, size_t span, const EntryKey& ekey,
                                  size_t need) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.regions.empty()) return nullptr;
  auto it = c.regions.upper_bound(begin);
  if (it == c.regions.begin()) return nullptr;
  --it;
  if (begin + span > it->first + it->second.size) return nullptr;
  std::shared_ptr<Entry>& slot = it->second.entries[ekey];
  if (!slot) {
    // Reserve the bytes now, so that concurrent first uses cannot overshoot the cap.
    if (c.bytes + need > c.cap) {
      it->second.entries.erase(ekey);
      return nullptr;
    }
    c.bytes += need;
    slot = std::make_shared<Entry>();
    slot->bytes = need;
  }
  return slot;
}

}  // namespace

PackedWeights packed_weight_panels(const PackedPanelsKey& key, PackPanelsFn pack, void* arg) {
  if (key.k <= 0 || key.n <= 0 || key.nr <= 0) return nullptr;
  const size_t need = static_cast<size_t>((key.n + key.nr - 1) / key.nr * key.nr * key.k) * sizeof(float);
  std::shared_ptr<Entry> entry =
      find_entry(reinterpret_cast<const uint8_t*>(key.b), span_bytes(key),
                 EntryKey{key.b, key.trans_b, key.k, key.n, key.ldb, key.nr}, need);
  if (!entry) return nullptr;
  std::call_once(entry->once, [&] {
    auto panels = std::make_shared<PackedWeightBuffer>(need / sizeof(float), /*zeroed=*/false);
    pack(key, panels->data(), arg);
    entry->panels = std::move(panels);
  });
  return entry->panels;
}

PackedWeights packed_weight_form(const void* data, size_t span_bytes, int64_t form, bool trans,
                                 int64_t k, int64_t n, int64_t ldb, size_t bytes, PackBytesFn pack,
                                 void* arg) {
  if (form <= 0 || k <= 0 || n <= 0 || bytes == 0) return nullptr;
  const size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  // A negative nr keeps these keys apart from the float panels' (whose nr is positive).
  std::shared_ptr<Entry> entry =
      find_entry(static_cast<const uint8_t*>(data), span_bytes,
                 EntryKey{static_cast<const float*>(data), trans, k, n, ldb, -form},
                 floats * sizeof(float));
  if (!entry) return nullptr;
  std::call_once(entry->once, [&] {
    auto buf = std::make_shared<PackedWeightBuffer>(floats, /*zeroed=*/true);
    pack(buf->data(), arg);
    entry->panels = std::move(buf);
  });
  return entry->panels;
}

size_t packed_weight_bytes() { return cache().bytes.load(); }

void set_packed_weight_cap_for_testing(size_t bytes) { cache().cap = bytes; }

}  // namespace cuvil::rt::ops
