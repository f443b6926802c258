// libFuzzer target for cuvilc's YAML config reader (options/config_file.cpp, yaml-cpp): every
// input is read or refused with a usage error whose message starts with the file name; never a
// crash, another exception or an internal error. Accepted configs must hold what the reader
// promises (limits non-negative, ranges lo <= hi, patterns well formed).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string_view>

#include "options/compile_options.h"
#include "support/error.h"
#include "tests/fuzz/fuzz_entries.h"

namespace cuvil::fuzz {

std::string fuzz_config_one(const uint8_t* data, size_t size) {
  return run_compiler_input<Diagnostic, InternalError>(
      [&]() -> std::string {
        CompileOptions o = parse_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
        for (size_t i = 0; i < static_cast<size_t>(LimitId::kCount); ++i)
          if (limit_value(o.limits, static_cast<LimitId>(i)) < 0) return "a negative limit was accepted";
        for (const auto& [name, r] : o.dims)
          if (r.lo < 0 || r.lo > r.hi) return "an empty or negative range was accepted for '" + name + "'";
        for (const Pattern& p : o.patterns)
          if (const std::string problem = check_pattern(p); !problem.empty())
            return "a malformed pattern was accepted: " + problem;
        return "";
      },
      [](const Diagnostic& d) -> std::string {
        if (d.code() != ExitCode::kUsage) return std::string("a config error that is not a usage error: ") + d.what();
        if (std::string_view(d.what()).rfind("fuzz.yaml", 0) != 0)
          return std::string("message does not start with the file: ") + d.what();
        return "";
      });
}

}  // namespace cuvil::fuzz

#if defined(CUVIL_FUZZ_STANDALONE)
CUVIL_FUZZ_DEFINE_STANDALONE_MAIN(cuvil::fuzz::fuzz_config_one)
#elif !defined(CUVIL_FUZZ_ENTRY_ONLY)
CUVIL_FUZZ_DEFINE_TEST_ONE_INPUT(cuvil::fuzz::fuzz_config_one)
#endif
