#include "support/output_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "support/error.h"
#include "support/unique_fd.h"

namespace cuvil {
namespace {

using output_file_testing::Stage;

// Named temporaries are "<target>.cuvil-tmp.<pid>.<6 letters or digits>".
constexpr std::string_view kTempMarker = ".cuvil-tmp.";
constexpr size_t kSuffixLength = 6;

output_file_testing::FaultHook g_fault_hook = nullptr;
bool g_force_named = false;

// The named temporary, for the signal handler (async-signal-safe: unlink, _exit). Armed only
// while the temporary has a name: an unnamed one disappears with the process by itself.
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

// Holds SIGINT/SIGTERM while a temporary gets its name and the handler is armed for it: a
// signal in between would otherwise leave the new name behind.
struct HoldSignals {
  sigset_t previous;
  HoldSignals() {
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGINT);
    sigaddset(&held, SIGTERM);
    sigprocmask(SIG_BLOCK, &held, &previous);
  }
  ~HoldSignals() { sigprocmask(SIG_SETMASK, &previous, nullptr); }
};


std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A fresh temporary name for `base`. Uniqueness is not needed for safety (names are created
// with O_EXCL or linkat, which refuse an existing one, and then retried).
std::string temporary_name(const std::string& base) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static std::atomic<uint64_t> counter{0};
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = static_cast<uint64_t>(ts.tv_nsec) * 0x9E3779B97F4A7C15ull ^
               (counter.fetch_add(1) + 1) * 0xBF58476D1CE4E5B9ull ^ static_cast<uint64_t>(ts.tv_sec);
  std::string name = base + std::string(kTempMarker) + std::to_string(getpid()) + ".";
  for (size_t i = 0; i < kSuffixLength; ++i) {
    name += kAlphabet[x % (sizeof kAlphabet - 1)];
    x /= sizeof kAlphabet - 1;
  }
  return name;
}

// The pid in a name of our pattern; 0 when `name` is not one of ours.
pid_t temporary_pid(std::string_view name) {
  size_t marker = name.rfind(kTempMarker);
  if (marker == std::string_view::npos || marker == 0) return 0;
  std::string_view rest = name.substr(marker + kTempMarker.size());
  size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 9) return 0;
  pid_t pid = 0;
  for (char c : rest.substr(0, dot)) {
    if (c < '0' || c > '9') return 0;
    pid = pid * 10 + (c - '0');
  }
  std::string_view suffix = rest.substr(dot + 1);
  if (suffix.size() != kSuffixLength) return 0;
  for (char c : suffix)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 0;
  return pid;
}

// Removes the named temporaries that killed or crashed writers left in this directory. Only
// regular files with one link, owned by us, named in our exact pattern, whose pid does not
// exist (kill(pid, 0) gives ESRCH; a zombie or a reused pid keeps its file) and that nobody
// holds locked: every writer holds an flock on its temporary until the rename, which guards a
// live writer whose pid means nothing here (another pid namespace on a shared directory).
// Best effort: a failure here never fails the write.
void remove_stale_temporaries(int dirfd) {
  int scan_fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (scan_fd < 0) return;
  DIR* scan = fdopendir(scan_fd);
  if (!scan) {
    close(scan_fd);
    return;
  }
  std::vector<std::string> candidates;
  while (dirent* e = readdir(scan)) {
    pid_t pid = temporary_pid(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    candidates.emplace_back(e->d_name);
  }
  closedir(scan);
  for (const std::string& name : candidates) {
    Fd file(openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (file.fd < 0) continue;
    struct stat st, now;
    if (fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_uid != geteuid())
      continue;
    if (flock(file.fd, LOCK_EX | LOCK_NB) != 0) continue;
    // Still the file we examined under that name.
    if (fstatat(dirfd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev &&
        now.st_ino == st.st_ino)
      unlinkat(dirfd, name.c_str(), 0);
  }
}

// One write in progress: the target, its directory and the temporary.
class AtomicWrite {
 public:
  AtomicWrite(const std::string& path, std::string dir, std::string base, int dirfd)
      : path_(path), dir_(std::move(dir)), base_(std::move(base)), dirfd_(dirfd) {}
  AtomicWrite(const AtomicWrite&) = delete;
  AtomicWrite& operator=(const AtomicWrite&) = delete;
  ~AtomicWrite() {
    if (fd_ >= 0) close(fd_);
  }

  // Writes through an unnamed temporary. False (and nothing left behind) when this
  // filesystem or process cannot: no O_TMPFILE, or the file cannot be linked in.
  bool write_unnamed(const Pieces& data, const OutputCheck& check) {
    fd_ = openat(dirfd_, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) return false;
      cannot_create(errno);
    }
    write_data(data);
    run_check(check);
    // Lock before the file gets a name, so no other writer ever sees it named and unlocked.
    flock(fd_, LOCK_EX | LOCK_NB);
    const std::string proc_path = "/proc/self/fd/" + std::to_string(fd_);
    for (int attempt = 0; attempt < 100; ++attempt) {
      HoldSignals hold;
      std::string name = temporary_name(base_);
      // Unprivileged: link the /proc magic link. Without /proc, AT_EMPTY_PATH (which needs
      // CAP_DAC_READ_SEARCH, and gives ENOENT without it).
      int rc = linkat(AT_FDCWD, proc_path.c_str(), dirfd_, name.c_str(), AT_SYMLINK_FOLLOW);
      if (rc != 0 && errno == ENOENT) rc = linkat(fd_, "", dirfd_, name.c_str(), AT_EMPTY_PATH);
      if (rc == 0) {
        arm(name);
        break;
      }
      if (errno == EEXIST) continue;
      // Any other failure (no /proc and no privilege, a sandbox without the magic link, ...):
      // the named temporary. A real problem of the directory (full, read-only) fails there.
      close(fd_);
      fd_ = -1;
      return false;
    }
    if (name_.empty()) abandon("link", EEXIST);
    finish();
    return true;
  }

  // Writes through a temporary that is named from the start.
  void write_named(const Pieces& data, const OutputCheck& check) {
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      HoldSignals hold;
      std::string name = temporary_name(base_);
      fd_ = openat(dirfd_, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd_ >= 0) arm(name);
      else if (errno != EEXIST) cannot_create(errno);
    }
    if (fd_ < 0) cannot_create(EEXIST);
    flock(fd_, LOCK_EX | LOCK_NB);
    write_data(data);
    run_check(check);
    finish();
  }

 private:
  [[noreturn]] void cannot_create(int err) {
    fail(ExitCode::kIo, "cannot create a file in '", dir_, "' for '", path_, "': ",
         std::strerror(err));
  }

  // Gives the signal handler the temporary's name; called with SIGINT/SIGTERM held.
  void arm(const std::string& name) {
    name_ = name;
    std::string full = dir_ + "/" + name;
    std::memcpy(g_temp_path, full.c_str(), full.size() + 1);
    g_temp_active = true;
  }

  // Removes the temporary, closes it and fails naming the target.
  [[noreturn]] void abandon(const char* what, int err) {
    close(fd_);
    fd_ = -1;
    if (!name_.empty()) {
      unlinkat(dirfd_, name_.c_str(), 0);
      g_temp_active = false;
    }
    fail(ExitCode::kIo, "writing '", path_, "' failed (", what, "): ", std::strerror(err),
         "; the previous file (if any) is unchanged");
  }

  void write_data(const Pieces& pieces) {
    size_t done = 0;
    for (std::string_view data : pieces) {
      size_t at = 0;
      while (at < data.size()) {
        size_t chunk = std::min(data.size() - at, output_file_testing::kChunkBytes);
        ssize_t n = write(fd_, data.data() + at, chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) abandon("write", n < 0 ? errno : ENOSPC);
        at += static_cast<size_t>(n);
        done += static_cast<size_t>(n);
        if (g_fault_hook)
          if (int err = g_fault_hook(Stage::kAfterChunk, done)) abandon("write", err);
      }
    }
    size_ = done;
    if (fchmod(fd_, 0644) != 0) abandon("chmod", errno);
    if (fsync(fd_) != 0) abandon("fsync", errno);
  }

  // The caller's check of the complete temporary; if it throws, the temporary goes.
  void run_check(const OutputCheck& check) {
    if (!check) return;
    try {
      check(fd_, size_);
    } catch (...) {
      close(fd_);
      fd_ = -1;
      if (!name_.empty()) {
        unlinkat(dirfd_, name_.c_str(), 0);
        g_temp_active = false;
      }
      throw;
    }
  }

  // The temporary is complete, synced and named: rename it over the target.
  void finish() {
    if (g_fault_hook)
      if (int err = g_fault_hook(Stage::kBeforeRename, 0)) abandon("rename", err);
    if (renameat(dirfd_, name_.c_str(), dirfd_, base_.c_str()) != 0) abandon("rename", errno);
    g_temp_active = false;
    // The data was synced before the rename, so an error closing it changes nothing now.
    close(fd_);
    fd_ = -1;
    fsync(dirfd_);
  }

  const std::string& path_;
  const std::string dir_, base_;
  const int dirfd_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes written
  std::string name_;  // of the temporary, once it has one
};

}  // namespace

void write_file_atomically(const std::string& path, std::string_view data) {
  write_file_atomically(path, Pieces{data}, {});
}

void write_file_atomically(const std::string& path, const Pieces& data, const OutputCheck& check) {
  const std::string dir = dir_of(path), base = base_of(path);
  if (base.empty() || base == "." || base == "..")
    fail(ExitCode::kIo, "cannot write '", path, "': it names a directory");
  // Room for the temporary's name in the signal handler's buffer.
  if (dir.size() + base.size() + kTempMarker.size() + 32 >= sizeof g_temp_path)
    fail(ExitCode::kIo, "output path is too long: '", path, "'");
  // The rename would replace whatever the name holds: never a device (as root, `-o /dev/null`
  // would otherwise turn /dev/null into a regular file), a FIFO, a socket or a directory. A
  // symlink is replaced itself, as any file is; its target is not touched.
  struct stat existing;
  if (lstat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode) && !S_ISLNK(existing.st_mode))
    fail(ExitCode::kIo, "cannot write '", path, "': it exists and is not a regular file (",
         S_ISDIR(existing.st_mode) ? "a directory" : "a device, FIFO or socket",
         "); refusing to replace it");
  Fd dirfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  // A directory we may write but not list (mode -wx): an O_PATH descriptor still serves the
  // *at calls; only the stale-temporary scan and the directory fsync are skipped.
  if (dirfd.fd < 0 && errno == EACCES) dirfd.fd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd.fd < 0)
    fail(ExitCode::kIo, "cannot open the directory '", dir, "' for '", path, "': ",
         std::strerror(errno));
  remove_stale_temporaries(dirfd.fd);
  SignalGuard guard;
  if (!g_force_named) {
    AtomicWrite unnamed(path, dir, base, dirfd.fd);
    if (unnamed.write_unnamed(data, check)) return;
  }
  AtomicWrite named(path, dir, base, dirfd.fd);
  named.write_named(data, check);
}

namespace output_file_testing {

void set_fault_hook(FaultHook hook) { g_fault_hook = hook; }
void set_force_named_temporary(bool force) { g_force_named = force; }
bool is_temporary_name(std::string_view name) { return temporary_pid(name) > 0; }

}  // namespace output_file_testing
}  // namespace cuvil
