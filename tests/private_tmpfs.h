// A real full disk for tests: runs a function in a forked child that has its own mount
// namespace with a small tmpfs mounted on a directory, so ENOSPC comes from the kernel and
// nothing outside the child sees the mount. Needs CAP_SYS_ADMIN (CI runs tests as root) or
// unprivileged user namespaces; callers skip with the reason when both are refused. Used by tests/output_file_test.cpp and
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

// Without CAP_SYS_ADMIN: a new user namespace (where we are root, mapped to our own uid and
// gid) with its own mount namespace, in which a tmpfs may be mounted. False where the kernel
// or a sandbox refuses user namespaces.
inline bool enter_user_namespace() {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
  auto put = [](const char* file, const std::string& text) {
    FILE* f = std::fopen(file, "w");
    if (!f) return false;
    bool ok = std::fputs(text.c_str(), f) >= 0;
    return std::fclose(f) == 0 && ok;
  };
  return put("/proc/self/setgroups", "deny") &&
         put("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") &&
         put("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
}

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
    if (unshare(CLONE_NEWNS) != 0 && !enter_user_namespace()) {
      std::fprintf(stderr, "unshare(CLONE_NEWNS), also in a new user namespace: %s\n",
                   std::strerror(errno));
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
