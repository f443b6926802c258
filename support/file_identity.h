// Which files a compile (or a cuvil-run run) reads, by identity, so that an output path that
// names one of them is refused before anything is written (`cuvilc compile m.onnx -o m.onnx`
// would otherwise replace the model). Identity is (st_dev, st_ino), never the spelling:
// "m.onnx", "./m.onnx", a symlink to it, a path through a symlinked directory and a hard link
// all name the same file, and a path that does not exist yet names none. Header-only, so that
// cuvil-run (which links only the runtime) can use it too.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace cuvil {

struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileIdentity& o) const { return dev == o.dev && ino == o.ino; }
};

// The identity of the file `path` names, following symlinks (final and in the parents);
// nullopt when it does not exist or cannot be examined (then it cannot be an input we read).
inline std::optional<FileIdentity> identity_of_path(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileIdentity{st.st_dev, st.st_ino};
}

inline std::optional<FileIdentity> identity_of_fd(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return std::nullopt;
  return FileIdentity{st.st_dev, st.st_ino};
}

// One file read, with what it is for messages: "the input model 'm.onnx'".
struct InputFile {
  FileIdentity id;
  std::string description;
};

// Records the input files read on this thread while it is alive (they nest: the innermost
// log records). The frontend notes each external data file it opens through
// note_input_file(), so the compiler driver learns them without a parameter threaded through
// every import signature; code that runs without a log notes nothing.
class InputFileLog {
 public:
  InputFileLog() : outer_(current()) { current() = this; }
  ~InputFileLog() { current() = outer_; }
  InputFileLog(const InputFileLog&) = delete;
  InputFileLog& operator=(const InputFileLog&) = delete;

  void add(const FileIdentity& id, std::string description) {
    files_.push_back({id, std::move(description)});
  }
  // Adds `path` if it exists (a missing input fails later with its own message).
  void add_path(const std::string& path, std::string description) {
    if (auto id = identity_of_path(path)) add(*id, std::move(description));
  }
  const std::vector<InputFile>& files() const { return files_; }
  // The input `output_path` would overwrite, or null: compares the identity of the existing
  // output (after following its links) with every input read so far.
  const InputFile* input_named_by(const std::string& output_path) const {
    auto out = identity_of_path(output_path);
    if (!out) return nullptr;
    for (const InputFile& f : files_)
      if (f.id == *out) return &f;
    return nullptr;
  }

  static InputFileLog*& current() {
    static thread_local InputFileLog* log = nullptr;
    return log;
  }

 private:
  InputFileLog* outer_;
  std::vector<InputFile> files_;
};

// Notes that the open file `fd` is read as `description`, in this thread's log if any.
inline void note_input_file(int fd, const std::string& description) {
  if (InputFileLog* log = InputFileLog::current())
    if (auto id = identity_of_fd(fd)) log->add(*id, description);
}

}  // namespace cuvil
