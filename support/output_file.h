// Atomic output files (RELIABILITY.md "process faults"): data goes to a temporary file in the
// destination directory, is fsynced, renamed over the target, and the directory is fsynced.
// On any failure the temporary is removed and an existing target stays byte-identical.
//
// The temporary is unnamed (O_TMPFILE) while the data is written, so a process killed with
// SIGKILL, or crashing, leaves nothing behind; it gets a name only for the instant between
// linking it in and the rename. Where the filesystem has no O_TMPFILE (or /proc is missing
// and we may not link with AT_EMPTY_PATH) a named temporary "<target>.cuvil-tmp.<pid>.<6>"
// is used instead. Either way a leftover of a killed writer is removed by the next write into
// the same directory: only files of exactly that pattern, owned by us, whose pid no longer
// exists and which no live writer holds locked (each writer holds an flock on its temporary).
// A SIGINT/SIGTERM during the write removes the temporary and exits 130/143.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cuvil {

// Throws Diagnostic(kIo) naming the path on failure (missing or read-only directory, disk
// full, ...).
void write_file_atomically(const std::string& path, std::string_view data);

// The same for data in pieces written in order (a package's metadata, then its weights straight
// from where they are, so no copy of the whole file is ever held in memory), with a check of
// the complete, synced temporary (`fd` open for reading and writing, `size` bytes) that runs
// before it replaces the target. A check that throws leaves the target unchanged and removes
// the temporary; its exception propagates.
using OutputCheck = std::function<void(int fd, uint64_t size)>;
using Pieces = std::vector<std::string_view>;
void write_file_atomically(const std::string& path, const Pieces& data, const OutputCheck& check);

// Test-only hooks (tests/output_file_test.cpp). Production code never sets them.
namespace output_file_testing {

// Data is written in chunks of this many bytes; the fault hook runs after each one.
constexpr size_t kChunkBytes = size_t{1} << 16;

enum class Stage {
  kAfterChunk,    // a chunk of data has been written to the temporary
  kBeforeRename,  // the temporary is complete and has a name; the rename comes next
};
// Runs at each stage with the bytes written so far. It may pause or kill the process; a
// non-zero return is an errno that the write then fails with, as if the system had returned
// it (e.g. ENOSPC).
using FaultHook = int (*)(Stage stage, size_t bytes_written);
void set_fault_hook(FaultHook hook);

// Skips O_TMPFILE, as on a filesystem without it: the temporary is named from the start.
void set_force_named_temporary(bool force);

// Whether `name` (a directory entry) has the pattern of our named temporaries.
bool is_temporary_name(std::string_view name);

}  // namespace output_file_testing
}  // namespace cuvil
