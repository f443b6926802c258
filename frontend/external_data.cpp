#include "frontend/external_data.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "frontend/printable.h"
#include "support/checked.h"
#include "support/error.h"
#include "support/unique_fd.h"
#include "support/file_identity.h"

namespace cuvil::frontend {
namespace {


[[noreturn]] void bad_ref(const std::string& tensor, const std::string& location,
                          const std::string& why) {
  fail(ExitCode::kInvalidModel, "tensor '", tensor, "': external data location '", location,
       "' ", why);
}

// Fallback for kernels without openat2 (or where a seccomp filter refuses it): walk the
// components one openat at a time. Intermediate components are opened with O_PATH|O_NOFOLLOW
// and must be real directories (a symlink gives ELOOP, like openat2); ".." gives EXDEV even
// though callers reject it first.
int open_beneath_walk(int dirfd, const std::string& location) {
  int cur = dup(dirfd);
  if (cur < 0) return -1;
  size_t start = 0;
  auto give_up = [&](int err) {
    close(cur);
    errno = err;
    return -1;
  };
  for (;;) {
    size_t slash = location.find('/', start);
    std::string comp = location.substr(start, slash == std::string::npos ? std::string::npos
                                                                          : slash - start);
    bool last = slash == std::string::npos;
    if (comp.empty() || comp == ".") {
      if (last) return give_up(EISDIR);
      start = slash + 1;
      continue;
    }
    if (comp == "..") return give_up(EXDEV);
    int flags = O_NOFOLLOW | O_CLOEXEC | (last ? (O_RDONLY | O_NONBLOCK) : O_PATH);
    int next = openat(cur, comp.c_str(), flags);
    if (next < 0) return give_up(errno);
    close(cur);
    cur = next;
    if (last) return cur;
    struct stat st;
    if (fstat(cur, &st) != 0) return give_up(errno);
    if (S_ISLNK(st.st_mode)) return give_up(ELOOP);
    if (!S_ISDIR(st.st_mode)) return give_up(ENOTDIR);
    start = slash + 1;
  }
}

}  // namespace

int open_beneath(int dirfd, const std::string& location, bool force_walk) {
  if (force_walk) return open_beneath_walk(dirfd, location);
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  // O_NONBLOCK: opening a FIFO must not block; we reject non-regular files right after.
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, dirfd, location.c_str(), &how, sizeof how);
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) return open_beneath_walk(dirfd, location);
  return static_cast<int>(fd);
}


std::vector<uint8_t> read_external_data(const std::string& model_dir,
                                        const std::string& tensor_name,
                                        const ExternalDataRef& ref, uint64_t expected_bytes) {
  const std::string& loc = ref.location;
  // Both come from the model file: escape them for the message (a NUL would end it early).
  const std::string tensor = printable(tensor_name), shown = printable(loc);
  if (loc.empty()) bad_ref(tensor, shown, "is empty");
  if (loc.find('\0') != std::string::npos) bad_ref(tensor, shown, "contains a NUL byte");
  if (loc[0] == '/' || loc[0] == '\\') bad_ref(tensor, shown, "is an absolute path");
  // Explicit rejection of parent references gives a clear message; openat2 would refuse too.
  {
    size_t start = 0;
    for (;;) {
      size_t slash = loc.find_first_of("/\\", start);
      std::string comp = loc.substr(start, slash == std::string::npos ? std::string::npos
                                                                       : slash - start);
      if (comp == "..") bad_ref(tensor, shown, "escapes the model directory ('..')");
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
      bad_ref(tensor, shown, "resolves through a symbolic link or out of the model directory");
    if (err == ENOENT)
      fail(ExitCode::kIo, "tensor '", tensor, "': external data file '", shown,
           "' not found in '", model_dir, "'");
    if (err == EISDIR) bad_ref(tensor, shown, "is a directory");
    fail(ExitCode::kIo, "tensor '", tensor, "': cannot open external data file '", shown,
         "': ", std::strerror(err));
  }
  struct stat st;
  if (fstat(file.fd, &st) != 0)
    fail(ExitCode::kIo, "tensor '", tensor, "': cannot stat '", shown, "': ",
         std::strerror(errno));
  if (S_ISDIR(st.st_mode)) bad_ref(tensor, shown, "is a directory");
  if (!S_ISREG(st.st_mode)) bad_ref(tensor, shown, "is not a regular file");
  if (st.st_nlink != 1)
    bad_ref(tensor, shown, "has " + std::to_string(st.st_nlink) +
                               " hard links (only single-link files are trusted)");
  // Clear O_NONBLOCK now that we know it is a regular file.
  fcntl(file.fd, F_SETFL, 0);
  // So that cuvilc refuses an output path naming this file (support/file_identity.h).
  note_input_file(file.fd, "the external data file '" + shown + "' of tensor '" + tensor + "'");

  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  uint64_t offset = ref.offset.value_or(0);
  if (offset > file_size)
    bad_ref(tensor, shown, "offset " + std::to_string(offset) + " is past the end of the " +
                               std::to_string(file_size) + "-byte file");
  uint64_t length = ref.length ? *ref.length : file_size - offset;
  if (!range_within(offset, length, file_size))
    bad_ref(tensor, shown, "offset " + std::to_string(offset) + " + length " +
                               std::to_string(length) + " is past the end of the " +
                               std::to_string(file_size) + "-byte file");
  if (length != expected_bytes)
    bad_ref(tensor, shown, "holds " + std::to_string(length) + " bytes but the tensor needs " +
                               std::to_string(expected_bytes));

  std::vector<uint8_t> bytes(length);
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = pread(file.fd, bytes.data() + done, length - done,
                      static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(ExitCode::kIo, "tensor '", tensor, "': reading '", shown, "' failed at byte ",
           offset + done, n < 0 ? std::string(": ") + std::strerror(errno) : ": unexpected end");
    done += static_cast<uint64_t>(n);
  }
  return bytes;
}

}  // namespace cuvil::frontend
