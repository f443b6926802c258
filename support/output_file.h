// Atomic output files (RELIABILITY.md "process faults"): data goes to a temporary file in the
// destination directory, is fsynced, renamed over the target, and the directory is fsynced.
// On any failure the temporary is removed and an existing target stays byte-identical. A
// SIGINT/SIGTERM during the write removes the temporary and exits 130/143.
#pragma once

#include <string>
#include <string_view>

namespace cuvil {

// Throws Diagnostic(kIo) naming the path on failure (missing or read-only directory, disk
// full, ...).
void write_file_atomically(const std::string& path, std::string_view data);

}  // namespace cuvil
