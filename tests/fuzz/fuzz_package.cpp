// libFuzzer target for the package loader and verifier: every input goes through
// LoadedPackage::open_memory (header, section table, checksums, manifest, program decoding,
// verify_program) and, when it loads, through the disassembler. The custom mutator reseals
// most mutants (recomputes the file size field and every section checksum) so they get past
// the checksums and reach the decoder and the verifier; the rest stay raw so the layout
// checks are fuzzed too. Build and run: tests/fuzz/README.md.
//
// The entry logic is fuzz_package_one (fuzz_entries.h), which the FuzzRegressions suite also
// runs; with -DCUVIL_FUZZ_STANDALONE the file has a main() that replays the files named on the
// command line (a regression corpus) with any compiler, no libFuzzer needed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>

#include "runtime/crc32.h"
#include "runtime/disasm.h"
#include "runtime/package.h"
#include "tests/fuzz/fuzz_entries.h"

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

namespace cuvil::fuzz {

// Also exported for the regression replay, which runs each file raw and resealed.
void reseal_package(uint8_t* data, size_t size) { reseal(data, size); }

std::string fuzz_package_one(const uint8_t* data, size_t size) {
  try {
    std::shared_ptr<rt::LoadedPackage> pkg;
    rt::Status st = rt::LoadedPackage::open_memory(data, size, /*copy=*/true, &pkg);
    if (st.is_ok()) {
      volatile size_t n = rt::disassemble(pkg->program()).size();
      (void)n;
    } else if (st.message().empty()) {
      return "open_memory failed without a message";  // every failure must say what is wrong
    }
  } catch (const std::exception& e) {
    return std::string("exception from the package loader: ") + e.what();
  }
  return "";
}

}  // namespace cuvil::fuzz

#if defined(CUVIL_FUZZ_STANDALONE)
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::string finding = cuvil::fuzz::fuzz_package_one(bytes.data(), bytes.size());
    // Also the resealed variant, as the fuzzer would produce it.
    reseal(bytes.data(), bytes.size());
    if (finding.empty()) finding = cuvil::fuzz::fuzz_package_one(bytes.data(), bytes.size());
    if (!finding.empty()) {
      std::cerr << argv[i] << ": finding: " << finding << "\n";
      return 1;
    }
    std::cout << argv[i] << ": ok\n";
  }
  return 0;
}
#elif !defined(CUVIL_FUZZ_ENTRY_ONLY)
CUVIL_FUZZ_DEFINE_TEST_ONE_INPUT(cuvil::fuzz::fuzz_package_one)

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 8 != 0) reseal(data, size);
  return size;
}
#endif
