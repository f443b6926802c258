// libFuzzer target for cuvil-run's .npy reader (cli/npy.h parse_npy): every input is read or
// refused with a message naming the file, never a crash or an exception; a tensor that is
// read holds exactly numel x element size bytes. Build and run: README.md here.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli/npy.h"
#include "tests/fuzz/fuzz_entries.h"
#include "tests/fuzz/fuzz_tensor_check.h"

namespace cuvil::fuzz {

std::string fuzz_npy_one(const uint8_t* data, size_t size) {
  tools::HostTensor t;
  std::string err;
  try {
    err = tools::parse_npy("fuzz.npy", data, size, &t);
  } catch (const std::exception& e) {
    return std::string("exception from parse_npy: ") + e.what();
  }
  if (!err.empty()) {
    if (err.find("fuzz.npy") == std::string::npos) return "message does not name the file: " + err;
    return "";
  }
  return check_host_tensor(t);
}

}  // namespace cuvil::fuzz

#if defined(CUVIL_FUZZ_STANDALONE)
CUVIL_FUZZ_DEFINE_STANDALONE_MAIN(cuvil::fuzz::fuzz_npy_one)
#elif !defined(CUVIL_FUZZ_ENTRY_ONLY)
CUVIL_FUZZ_DEFINE_TEST_ONE_INPUT(cuvil::fuzz::fuzz_npy_one)
#endif
