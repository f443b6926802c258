// Run-time status: a code and a message. The runtime never aborts or throws across its API;
// every failure is a Status naming the object (tensor, input, section, instruction) at fault.
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace cuvil::rt {

// Numbering matches cuvil_status_code in runtime/include/cuvil.h.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad API use or bad run-time input (dtype, rank, dims, buffer size)
  kInvalidPackage = 2,   // the package failed verification
  kUnsupported = 3,      // valid request the runtime cannot serve (no kernel, no GPU)
  kIo = 4,               // cannot read a file
  kShape = 5,            // a dim outside the compiled range, or shapes that disagree at run time
  kRuntime = 6,          // a data-dependent failure while running (index out of range, ...)
  kOutOfMemory = 7,      // memory or another system resource (a worker thread) ran out
  kDeadline = 8,         // the run exceeded its deadline (e.g. an endless loop)
  kCancelled = 9,        // another thread cancelled the run (cuvil_session_cancel)
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Parts>
Status make_status(StatusCode code, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return Status(code, os.str());
}

#define CUVIL_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::cuvil::rt::Status cuvil_st_ = (expr);  \
    if (!cuvil_st_.is_ok()) return cuvil_st_; \
  } while (0)

}  // namespace cuvil::rt
