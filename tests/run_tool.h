// Runs one of the command-line tools (cuvilc, cuvil-run) from a test through the shell, with
// a 60 s timeout so that a hang fails the test instead of stalling the suite, and captures its
// exit code, stdout and stderr. Used by tests/cli_bad_input_test.cpp and tests/cli_run_test.cpp.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "onnx_builder.h"

namespace cuvil::test {

// The names in a directory, without "." and "..".
inline std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.insert(n);
    }
    closedir(d);
  }
  return names;
}

struct RunResult {
  int exit_code = -1;  // -1: did not exit normally (e.g. a crash)
  std::string out, err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `<prefix><binary> <args>` (binary and each argument quoted); `prefix` goes before the
// binary (e.g. a setpriv invocation). stdout and stderr go through files in `dir`.
inline RunResult run_tool(const std::string& dir, const std::string& binary,
                          const std::vector<std::string>& args, const std::string& prefix = "") {
  const std::string out = dir + "/.stdout", err = dir + "/.stderr";
  std::string cmd = "timeout 60 " + prefix + shell_quote(binary);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(out) + " 2>" + shell_quote(err) + " </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_bytes(out);
  r.err = read_bytes(err);
  unlink(out.c_str());
  unlink(err.c_str());
  return r;
}

// Makes `dir` the current directory until the end of the scope (for relative-path cases),
// also when an assertion returns early.
class ScopedChdir {
 public:
  explicit ScopedChdir(const std::string& dir) {
    ok_ = getcwd(previous_, sizeof previous_) != nullptr && chdir(dir.c_str()) == 0;
  }
  ~ScopedChdir() {
    if (ok_ && chdir(previous_) != 0) std::abort();
  }
  ScopedChdir(const ScopedChdir&) = delete;
  ScopedChdir& operator=(const ScopedChdir&) = delete;
  bool ok() const { return ok_; }

 private:
  char previous_[4096];
  bool ok_ = false;
};

}  // namespace cuvil::test
