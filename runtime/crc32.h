// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of every package
// section (docs/format.md). One function, two implementations chosen at run time: the SSE4.2
// `crc32` instruction where the CPU has it, slicing-by-8 tables elsewhere. Both give the same
// value for the same bytes, so packages are portable between machines.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cuvil::rt {

// CRC-32C of `size` bytes. `crc` continues a previous result (0 to start), so
// crc32c(ab) == crc32c(b, crc32c(a)).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The portable table implementation, exposed so tests can compare it with the fast path.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

}  // namespace cuvil::rt
