// A file descriptor closed when it goes out of scope (no copies), for code that opens files
// with POSIX calls (openat2, O_TMPFILE) and has several ways out.
#pragma once

#include <unistd.h>

namespace cuvil {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace cuvil
