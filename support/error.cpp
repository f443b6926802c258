#include "support/error.h"

namespace cuvil {

const char* exit_code_name(ExitCode code) {
  switch (code) {
    case ExitCode::kOk: return "ok";
    case ExitCode::kUsage: return "usage error";
    case ExitCode::kInvalidModel: return "invalid model";
    case ExitCode::kUnsupported: return "unsupported feature";
    case ExitCode::kIo: return "I/O error";
    case ExitCode::kInternal: return "internal error";
  }
  return "unknown";
}

void internal_assert_failed(const char* expr, const char* file, int line,
                            const std::string& message) {
  std::ostringstream os;
  os << "internal error: " << file << ":" << line << ": assertion '" << expr << "' failed";
  if (!message.empty()) os << ": " << message;
  throw InternalError(os.str());
}

}  // namespace cuvil
