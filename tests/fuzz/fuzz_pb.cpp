// libFuzzer target for cuvil-run's TensorProto .pb reader (cli/npy.h parse_tensor_pb): every
// input is read or refused with a message naming the file, never a crash or an exception; a
// tensor that is read holds exactly numel x element size bytes. Build and run: README.md here.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli/npy.h"
#include "tests/fuzz/fuzz_entries.h"
#include "tests/fuzz/fuzz_tensor_check.h"

namespace cuvil::fuzz {

std::string fuzz_pb_one(const uint8_t* data, size_t size) {
  tools::HostTensor t;
  std::string err;
  try {
    err = tools::parse_tensor_pb("fuzz.pb", data, size, &t);
  } catch (const std::exception& e) {
    return std::string("exception from parse_tensor_pb: ") + e.what();
  }
  if (!err.empty()) {
    if (err.find("fuzz.pb") == std::string::npos) return "message does not name the file: " + err;
    return "";
  }
  return check_host_tensor(t);
}

}  // namespace cuvil::fuzz

#if defined(CUVIL_FUZZ_STANDALONE)
CUVIL_FUZZ_DEFINE_STANDALONE_MAIN(cuvil::fuzz::fuzz_pb_one)
#elif !defined(CUVIL_FUZZ_ENTRY_ONLY)
CUVIL_FUZZ_DEFINE_TEST_ONE_INPUT(cuvil::fuzz::fuzz_pb_one)
#endif
