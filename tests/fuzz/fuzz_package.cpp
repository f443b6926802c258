// libFuzzer target for the package loader and verifier: every input goes through
// LoadedPackage::open_memory (header, section table, checksums, manifest, program decoding,
// verify_program) and, when it loads, through the disassembler. The custom mutator reseals
// most mutants (recomputes the file size field and every section checksum) so they get past
// the checksums and reach the decoder and the verifier; the rest stay raw so the layout
// checks are fuzzed too. Build and run: tests/fuzz/README.md.
//
// With -DCUVIL_FUZZ_STANDALONE the file has a main() that replays the files named on the
// command line (a regression corpus) with any compiler, no libFuzzer needed.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "runtime/crc32.h"
#include "runtime/disasm.h"
#include "runtime/package.h"

namespace {

uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  std::memcpy(&v, p, n);  // little-endian host
  return v;
}

// Sets the file size field and recomputes the checksum of every section whose bounds are in
// the buffer (docs/format.md: header at 0, table at header_size, 32-byte entries).
void reseal(uint8_t* data, size_t size) {
  using namespace cuvil::rt;
  if (size < kHeaderSize) return;
  const uint64_t file_size = size;
  std::memcpy(data + 24, &file_size, 8);
  const uint64_t header_size = load_le(data + 20, 4);
  const uint64_t count = load_le(data + 16, 4);
  for (uint64_t i = 0; i < count && i < kMaxSections; ++i) {
    const uint64_t at = header_size + kSectionEntrySize * i;
    if (at > size || size - at < kSectionEntrySize) break;
    const uint64_t off = load_le(data + at + 8, 8), len = load_le(data + at + 16, 8);
    if (off > size || len > size - off) continue;
    const uint32_t crc = crc32c(data + off, len);
    std::memcpy(data + at + 28, &crc, 4);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<cuvil::rt::LoadedPackage> pkg;
  cuvil::rt::Status st = cuvil::rt::LoadedPackage::open_memory(data, size, /*copy=*/true, &pkg);
  if (st.is_ok()) {
    volatile size_t n = cuvil::rt::disassemble(pkg->program()).size();
    (void)n;
  } else if (st.message().empty()) {
    __builtin_trap();  // every failure must say what is wrong
  }
  return 0;
}

#ifndef CUVIL_FUZZ_STANDALONE
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 8 != 0) reseal(data, size);
  return size;
}
#else
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    // Also the resealed variant, as the fuzzer would produce it.
    reseal(bytes.data(), bytes.size());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    std::cout << argv[i] << ": ok\n";
  }
  return 0;
}
#endif
