#include "support/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "support/error.h"

namespace cuvil {
namespace {

// The temp path being written, for the signal handler (async-signal-safe: unlink, _exit).
char g_temp_path[4096];
std::atomic<bool> g_temp_active{false};

extern "C" void remove_temp_and_exit(int sig) {
  if (g_temp_active.load()) unlink(g_temp_path);
  _exit(128 + sig);
}

struct SignalGuard {
  struct sigaction old_int, old_term;
  SignalGuard() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_temp_and_exit;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view data) {
  const std::string dir = dir_of(path);
  std::string temp = path + ".tmp.XXXXXX";
  if (temp.size() >= sizeof g_temp_path)
    fail(ExitCode::kIo, "output path is too long: '", path, "'");
  SignalGuard guard;
  // Hold SIGINT/SIGTERM while mkstemp fills in the name and the handler is armed: a signal in
  // between would otherwise leave the new temporary behind (or see a half-written name).
  sigset_t held, previous;
  sigemptyset(&held);
  sigaddset(&held, SIGINT);
  sigaddset(&held, SIGTERM);
  sigprocmask(SIG_BLOCK, &held, &previous);
  std::strcpy(g_temp_path, temp.c_str());
  int fd = mkstemp(g_temp_path);
  int create_errno = errno;
  if (fd >= 0) g_temp_active = true;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (fd < 0)
    fail(ExitCode::kIo, "cannot create a file in '", dir, "' for '", path, "': ",
         std::strerror(create_errno));
  auto abandon = [&](const char* what, int err) {
    close(fd);
    unlink(g_temp_path);
    g_temp_active = false;
    fail(ExitCode::kIo, "writing '", path, "' failed (", what, "): ", std::strerror(err),
         "; the previous file (if any) is unchanged");
  };
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abandon("write", n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd, 0644) != 0) abandon("chmod", errno);
  if (fsync(fd) != 0) abandon("fsync", errno);
  if (close(fd) != 0) {
    int err = errno;
    unlink(g_temp_path);
    g_temp_active = false;
    fail(ExitCode::kIo, "writing '", path, "' failed (close): ", std::strerror(err));
  }
  if (rename(g_temp_path, path.c_str()) != 0) {
    int err = errno;
    unlink(g_temp_path);
    g_temp_active = false;
    fail(ExitCode::kIo, "cannot rename the temporary file to '", path, "': ", std::strerror(err));
  }
  g_temp_active = false;
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
}

}  // namespace cuvil
