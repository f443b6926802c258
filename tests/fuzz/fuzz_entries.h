// The entry function of every fuzz target, kept apart from libFuzzer so that the ordinary
// build can replay corpora through exactly the code the fuzzer runs (suite FuzzRegressions,
// tests/fuzz_regressions_test.cpp). Each returns "" when the input ended in an expected way
// (loaded, or refused with a message) and otherwise a description of the finding; the
// libFuzzer wrappers print it and abort, so the fuzzer saves the input.
//
// Each fuzz_<target>.cpp defines its entry function always, and LLVMFuzzerTestOneInput (plus
// any custom mutator) unless CUVIL_FUZZ_ENTRY_ONLY is defined; with CUVIL_FUZZ_STANDALONE it
// has a main() that replays the files named on its command line, with any compiler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

namespace cuvil::fuzz {

// Package loader + verifier + disassembler (fuzz_package.cpp).
std::string fuzz_package_one(const uint8_t* data, size_t size);
// Rewrites the file size field and every section checksum, as the package mutator does.
void reseal_package(uint8_t* data, size_t size);
// ONNX bytes through import, verification, passes, support check, lowering, packaging, and
// the package back through the runtime's loader (fuzz_onnx.cpp).
std::string fuzz_onnx_one(const uint8_t* data, size_t size);
// cuvil-run's tensor readers (fuzz_npy.cpp, fuzz_pb.cpp).
std::string fuzz_npy_one(const uint8_t* data, size_t size);
std::string fuzz_pb_one(const uint8_t* data, size_t size);
// cuvilc's YAML config reader (fuzz_config.cpp).
std::string fuzz_config_one(const uint8_t* data, size_t size);

}  // namespace cuvil::fuzz

namespace cuvil::fuzz {

// Runs one compiler-side input: `body` returns "" or a finding; `diagnostic` judges a user
// error (a Diagnostic is the expected outcome for bad input, so it returns "" unless the
// diagnostic itself is wrong). An InternalError (cuvilc exit 70), running out of memory or any
// other exception is a finding. Templated so this header needs no compiler headers.
template <typename Diag, typename Internal, typename Body, typename OnDiagnostic>
std::string run_compiler_input(Body&& body, OnDiagnostic&& diagnostic) {
  try {
    return body();
  } catch (const Diag& d) {
    return diagnostic(d);
  } catch (const Internal& e) {
    return std::string("internal error (cuvilc exit 70): ") + e.what();
  } catch (const std::bad_alloc&) {
    return "out of memory (std::bad_alloc)";
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  }
}

// Triage aid for long runs: CUVIL_FUZZ_IGNORE="text1|text2" makes findings whose description
// contains one of the texts count as expected outcomes, so a run goes on past known, open
// findings (docs/security.md lists them). Never set in CI.
inline bool finding_ignored(const std::string& finding) {
  const char* env = std::getenv("CUVIL_FUZZ_IGNORE");
  if (!env || !*env) return false;
  const std::string list(env);
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find('|', begin);
    if (end == std::string::npos) end = list.size();
    if (end > begin && finding.find(list.substr(begin, end - begin)) != std::string::npos) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace cuvil::fuzz

// The libFuzzer wrapper of one entry function: a finding is printed and aborts.
#define CUVIL_FUZZ_DEFINE_TEST_ONE_INPUT(entry)                                       \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {           \
    const std::string finding = entry(data, size);                                    \
    if (!finding.empty() && !cuvil::fuzz::finding_ignored(finding)) {                 \
      std::fprintf(stderr, "\n==cuvil fuzz finding== %s\n", finding.c_str());         \
      std::abort();                                                                   \
    }                                                                                 \
    return 0;                                                                         \
  }

// main() for -DCUVIL_FUZZ_STANDALONE: replays files, exit 1 on the first finding.
#define CUVIL_FUZZ_DEFINE_STANDALONE_MAIN(entry)                                      \
  int main(int argc, char** argv) {                                                   \
    for (int i = 1; i < argc; ++i) {                                                  \
      std::FILE* f = std::fopen(argv[i], "rb");                                       \
      if (!f) { std::fprintf(stderr, "%s: cannot open\n", argv[i]); return 2; }       \
      std::string bytes;                                                              \
      char buf[65536];                                                                \
      size_t n;                                                                       \
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);      \
      std::fclose(f);                                                                 \
      const std::string finding =                                                     \
          entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());        \
      if (!finding.empty()) {                                                         \
        std::fprintf(stderr, "%s: finding: %s\n", argv[i], finding.c_str());          \
        return 1;                                                                     \
      }                                                                               \
      std::printf("%s: ok\n", argv[i]);                                               \
    }                                                                                 \
    return 0;                                                                         \
  }
