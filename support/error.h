// Error kinds and the exit codes of every cuvil tool.
//
// Two kinds of failure are kept apart (STYLE.md rule 7): a `Diagnostic` is a user error (bad
// model, unsupported feature, bad option, I/O) and carries the exit code the CLI returns; a
// broken internal invariant is `CUVIL_ASSERT`, which throws `InternalError` so the CLI can
// report "internal error" with exit code 70 instead of crashing.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace cuvil {

// Documented in docs/cli.md; tests expect these exact numbers.
enum class ExitCode : int {
  kOk = 0,
  kUsage = 2,         // bad command line or config
  kInvalidModel = 3,  // the ONNX file is malformed or inconsistent
  kUnsupported = 4,   // valid ONNX that cuvil does not handle (yet)
  kIo = 5,            // cannot read/write a file
  kInternal = 70,     // a cuvil bug (EX_SOFTWARE)
};

const char* exit_code_name(ExitCode code);

class Diagnostic : public std::runtime_error {
 public:
  Diagnostic(ExitCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Builds a message from stream pieces: fail(ExitCode::kInvalidModel, "node '", n, "': ...").
template <typename... Parts>
[[noreturn]] void fail(ExitCode code, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Diagnostic(code, os.str());
}

[[noreturn]] void internal_assert_failed(const char* expr, const char* file, int line,
                                         const std::string& message);

}  // namespace cuvil

#define CUVIL_ASSERT(cond, msg)                                                        \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::ostringstream cuvil_assert_os_;                                             \
      cuvil_assert_os_ << msg;                                                         \
      ::cuvil::internal_assert_failed(#cond, __FILE__, __LINE__, cuvil_assert_os_.str()); \
    }                                                                                  \
  } while (0)
