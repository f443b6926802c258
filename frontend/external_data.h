// Safe access to ONNX external data files (RELIABILITY.md bug class 6).
//
// A tensor's `location` is resolved strictly beneath the model's directory with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) — or, where the
// kernel lacks openat2, a component-by-component walk with O_NOFOLLOW that rejects "..".
// The opened file must be a regular file with exactly one link; offset/length are checked
// against its size with the checked-arithmetic helper. No string-based path containment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cuvil::frontend {

struct ExternalDataRef {
  std::string location;
  std::optional<uint64_t> offset;
  std::optional<uint64_t> length;
};

// Opens `location` strictly beneath the directory `dirfd`: read-only, non-blocking, no
// symlinks anywhere in the path, no "..". Uses openat2 where the kernel allows it, else the
// component-by-component walk; `force_walk` selects the walk (so tests cover both). Returns
// -1 with errno set: ELOOP (a symlink), EXDEV (escapes the directory), ENOENT, EISDIR, ...
int open_beneath(int dirfd, const std::string& location, bool force_walk = false);

// Reads the bytes of one external tensor. `model_dir` is the directory of the .onnx file.
// `expected_bytes` is numel x element size; a length that disagrees, or a missing length
// whose remaining file size disagrees, is an error. Throws Diagnostic (kInvalidModel for bad
// references, kIo for files that cannot be read) naming the tensor and the location.
std::vector<uint8_t> read_external_data(const std::string& model_dir,
                                        const std::string& tensor_name,
                                        const ExternalDataRef& ref, uint64_t expected_bytes);

}  // namespace cuvil::frontend
