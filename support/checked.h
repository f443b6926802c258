// The one checked-arithmetic helper for sizes and offsets (RELIABILITY.md bug classes 1-2).
// Every offset/length/element-count computed from file contents goes through these; they
// report overflow instead of wrapping.
#pragma once

#include <cstdint>
#include <optional>

namespace cuvil {

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<uint64_t> checked_add_u64(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<uint64_t> checked_mul_u64(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// True when [offset, offset+length) lies inside [0, size), without wrapping.
inline bool range_within(uint64_t offset, uint64_t length, uint64_t size) {
  auto end = checked_add_u64(offset, length);
  return end && *end <= size;
}

// Product of non-negative dims; nullopt on a negative dim or overflow.
template <typename Range>
std::optional<int64_t> checked_numel(const Range& dims) {
  int64_t n = 1;
  for (auto d : dims) {
    if (d < 0) return std::nullopt;
    auto m = checked_mul(n, static_cast<int64_t>(d));
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

}  // namespace cuvil
