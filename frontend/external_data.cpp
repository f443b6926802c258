#include "frontend/external_data.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "support/checked.h"
#include "support/error.h"

namespace cuvil::frontend {
namespace {

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

[[noreturn]] void bad_ref(const std::string& tensor, const std::string& location,
                          const std::string& why) {
  fail(ExitCode::kInvalidModel, "tensor '", tensor, "': external data location '", location,
       "' ", why);
}

// Fallback for kernels without openat2: walk the components with O_NOFOLLOW; ".." and
// absolute paths are rejected before this is reached.
int open_beneath_walk(int dirfd, const std::string& location) {
  int cur = dup(dirfd);
  if (cur < 0) return -1;
  size_t start = 0;
  for (;;) {
    size_t slash = location.find('/', start);
    std::string comp = location.substr(start, slash == std::string::npos ? std::string::npos
                                                                          : slash - start);
    bool last = slash == std::string::npos;
    if (comp.empty() || comp == ".") {
      if (last) {
        close(cur);
        errno = EISDIR;
        return -1;
      }
      start = slash + 1;
      continue;
    }
    int flags = O_NOFOLLOW | O_CLOEXEC | (last ? (O_RDONLY | O_NONBLOCK) : (O_PATH | O_DIRECTORY));
    int next = openat(cur, comp.c_str(), flags);
    int saved = errno;
    close(cur);
    if (next < 0) {
      errno = saved;
      return -1;
    }
    if (last) return next;
    cur = next;
    start = slash + 1;
  }
}

int open_beneath(int dirfd, const std::string& location) {
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  // O_NONBLOCK: opening a FIFO must not block; we reject non-regular files right after.
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, dirfd, location.c_str(), &how, sizeof how);
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) return open_beneath_walk(dirfd, location);
  return static_cast<int>(fd);
}

}  // namespace

std::vector<uint8_t> read_external_data(const std::string& model_dir,
                                        const std::string& tensor_name,
                                        const ExternalDataRef& ref, uint64_t expected_bytes) {
  const std::string& loc = ref.location;
  if (loc.empty()) bad_ref(tensor_name, loc, "is empty");
  if (loc.find('\0') != std::string::npos) bad_ref(tensor_name, loc, "contains a NUL byte");
  if (loc[0] == '/' || loc[0] == '\\') bad_ref(tensor_name, loc, "is an absolute path");
  // Explicit rejection of parent references gives a clear message; openat2 would refuse too.
  {
    size_t start = 0;
    for (;;) {
      size_t slash = loc.find_first_of("/\\", start);
      std::string comp = loc.substr(start, slash == std::string::npos ? std::string::npos
                                                                       : slash - start);
      if (comp == "..") bad_ref(tensor_name, loc, "escapes the model directory ('..')");
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
  }

  Fd dir(open(model_dir.empty() ? "." : model_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (dir.fd < 0)
    fail(ExitCode::kIo, "cannot open model directory '", model_dir, "': ", std::strerror(errno));
  Fd file(open_beneath(dir.fd, loc));
  if (file.fd < 0) {
    int err = errno;
    if (err == ELOOP || err == EXDEV)
      bad_ref(tensor_name, loc, "resolves through a symbolic link or out of the model directory");
    if (err == ENOENT)
      fail(ExitCode::kIo, "tensor '", tensor_name, "': external data file '", loc,
           "' not found in '", model_dir, "'");
    if (err == EISDIR) bad_ref(tensor_name, loc, "is a directory");
    fail(ExitCode::kIo, "tensor '", tensor_name, "': cannot open external data file '", loc,
         "': ", std::strerror(err));
  }
  struct stat st;
  if (fstat(file.fd, &st) != 0)
    fail(ExitCode::kIo, "tensor '", tensor_name, "': cannot stat '", loc, "': ",
         std::strerror(errno));
  if (S_ISDIR(st.st_mode)) bad_ref(tensor_name, loc, "is a directory");
  if (!S_ISREG(st.st_mode)) bad_ref(tensor_name, loc, "is not a regular file");
  if (st.st_nlink != 1)
    bad_ref(tensor_name, loc, "has " + std::to_string(st.st_nlink) +
                                  " hard links (only single-link files are trusted)");
  // Clear O_NONBLOCK now that we know it is a regular file.
  fcntl(file.fd, F_SETFL, 0);

  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  uint64_t offset = ref.offset.value_or(0);
  if (offset > file_size)
    bad_ref(tensor_name, loc, "offset " + std::to_string(offset) + " is past the end of the " +
                                  std::to_string(file_size) + "-byte file");
  uint64_t length = ref.length ? *ref.length : file_size - offset;
  if (!range_within(offset, length, file_size))
    bad_ref(tensor_name, loc, "offset " + std::to_string(offset) + " + length " +
                                  std::to_string(length) + " is past the end of the " +
                                  std::to_string(file_size) + "-byte file");
  if (length != expected_bytes)
    bad_ref(tensor_name, loc, "holds " + std::to_string(length) + " bytes but the tensor needs " +
                                  std::to_string(expected_bytes));

  std::vector<uint8_t> bytes(length);
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = pread(file.fd, bytes.data() + done, length - done,
                      static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(ExitCode::kIo, "tensor '", tensor_name, "': reading '", loc, "' failed at byte ",
           offset + done, n < 0 ? std::string(": ") + std::strerror(errno) : ": unexpected end");
    done += static_cast<uint64_t>(n);
  }
  return bytes;
}

}  // namespace cuvil::frontend
