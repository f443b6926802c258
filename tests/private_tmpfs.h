// A real full disk for tests: runs a function in a forked child that has its own mount
// namespace with a small tmpfs mounted on a directory, so ENOSPC comes from the kernel and
// nothing outside the child sees the mount. Needs CAP_SYS_ADMIN (CI runs tests as root);
// callers skip with the reason when it is refused. Used by tests/output_file_test.cpp and
// tests/cli_bad_input_test.cpp.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

namespace cuvil::test {

// The child's exit code when the namespace or the mount is refused.
constexpr int kPrivateMountRefused = 77;

// Runs `body` in a child with a `size` tmpfs (mount option, e.g. "64k") on `dir`, which must
// exist. Returns the child's exit code (`body`'s return value, or kPrivateMountRefused), or -1
// when it did not exit normally. `body` must not throw; report failures on stderr and return
// non-zero.
inline int run_with_private_tmpfs(const std::string& dir, const std::string& size,
                                  const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0) {
      std::fprintf(stderr, "unshare(CLONE_NEWNS): %s\n", std::strerror(errno));
      _exit(kPrivateMountRefused);
    }
    // Keep our mounts out of the parent's namespace (systemd makes / shared).
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      std::fprintf(stderr, "mount: %s\n", std::strerror(errno));
      _exit(kPrivateMountRefused);
    }
    int rc = body();
    std::fflush(nullptr);
    _exit(rc);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace cuvil::test
