// The one bounds-checked view for reading package bytes (STYLE.md rule 8). Every read checks
// the remaining length first; a failed read latches `failed()` and returns zeros, so decoders
// can read a whole record and check once. Counts are validated against the bytes left before
// anything is allocated, so a hostile count cannot trigger a huge allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace cuvil::rt {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool failed() const { return failed_; }
  size_t remaining() const { return failed_ ? 0 : size_ - pos_; }
  size_t position() const { return pos_; }

  template <typename T>
  T read() {
    T v{};
    if (failed_ || size_ - pos_ < sizeof(T)) {
      failed_ = true;
      return v;
    }
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint8_t u8() { return read<uint8_t>(); }
  uint32_t u32() { return read<uint32_t>(); }
  uint64_t u64() { return read<uint64_t>(); }
  int32_t i32() { return read<int32_t>(); }
  int64_t i64() { return read<int64_t>(); }
  float f32() { return read<float>(); }

  // A count of items that each take at least `min_item_bytes`; fails when impossible.
  uint32_t count(size_t min_item_bytes) {
    uint32_t n = u32();
    if (!failed_ && min_item_bytes > 0 && n > remaining() / min_item_bytes) failed_ = true;
    return failed_ ? 0 : n;
  }
  std::string str() {
    uint32_t n = count(1);
    if (failed_) return {};
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  bool bytes(uint8_t* out, size_t n) {
    if (failed_ || size_ - pos_ < n) {
      failed_ = true;
      return false;
    }
    if (n) std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return true;
  }
  bool skip(size_t n) {
    if (failed_ || size_ - pos_ < n) {
      failed_ = true;
      return false;
    }
    pos_ += n;
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// Little-endian appends for the encoder.
class ByteWriter {
 public:
  template <typename T>
  void put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void u8(uint8_t v) { put(v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  void i32(int32_t v) { put(v); }
  void i64(int64_t v) { put(v); }
  void f32(float v) { put(v); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void bytes(const uint8_t* p, size_t n) { out_.insert(out_.end(), p, p + n); }
  std::vector<uint8_t>& data() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

}  // namespace cuvil::rt
