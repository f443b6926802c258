// The .cuvir package, format 3 (docs/format.md): a fixed header, a section table, and the
// sections of runtime/sections.def: MANIFEST, WEIGHTS, PROGRAMS (one program per shape bucket),
// BUCKETS (each program's guard), the optional REPORT, the optional STATE (tensors a session
// keeps across runs: a KV cache) and the optional PTX (the megakernel per GPU target,
// runtime/ptx_section.h); PANELS and QUANT are reserved for the issues that define them.
// write_package produces the bytes
// (deterministically); LoadedPackage opens a file (memory-mapped, weights used in place) or a
// memory buffer and verifies ALL of it before returning: header, section table bounds,
// alignment and overlap, per-section CRC-32C, manifest text, program decoding and
// verify_program (runtime/verifier.h). There is no path to a LoadedPackage around the checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/program.h"
#include "runtime/ptx_section.h"
#include "runtime/status.h"

namespace cuvil::rt {

// ---- format 3 constants (docs/format.md) ----
constexpr char kPackageMagic[8] = {'C', 'U', 'V', 'I', 'R', '\0', '\r', '\n'};
// 2: loop records and reduction-loop kernels in PROGRAM. 3: the section table of
// runtime/sections.def, several programs (PROGRAMS) with guards (BUCKETS).
constexpr uint16_t kFormatMajor = 3;
constexpr uint16_t kFormatMinor = 0;
constexpr uint32_t kKnownFeatures = 0;  // feature bits this runtime understands
constexpr uint32_t kHeaderSize = 32;    // the format 2.0 and 3.0 header
constexpr uint32_t kSectionEntrySize = 32;
constexpr uint32_t kMaxSections = 1024;
constexpr uint32_t kMaxSectionAlignment = 4096;
constexpr uint32_t kWeightsAlignment = 64;
constexpr uint32_t kSectionCritical = 1u;  // flags bit 0; bits 1-31 are reserved (zero)
constexpr uint32_t kMaxPrograms = 256;      // programs (buckets) in one package

// One enumerator per row of runtime/sections.def; the value is the kind stored in the file.
enum class SectionKind : uint32_t {
#define CUVIL_SECTION(kind, NAME, ...) NAME = kind,
#include "runtime/sections.def"
#undef CUVIL_SECTION
};

// A row of runtime/sections.def.
struct SectionInfo {
  uint32_t kind;
  const char* name;
  bool once;       // exactly once (else at most once)
  bool critical;   // must carry the critical flag
  uint32_t min_alignment;
  bool reserved;   // declared, not read by this runtime
  const char* owner;
  const char* contents;
};
const std::vector<SectionInfo>& section_table();
const SectionInfo* find_section_info(uint32_t kind);  // null for an unknown kind
// The table's name, or "kind N" for others.
std::string section_kind_name(uint32_t kind);

// Which program of a package runs: the first whose guard holds for the bound symbols. A
// guard is a list of inclusive ranges of shape symbols (indices into the programs' common
// symbol table); an empty guard always holds, and the last program's guard must be empty so
// that every shape inside the declared ranges has a program.
struct BucketGuard {
  struct Range {
    uint32_t symbol = 0;
    int64_t lo = 0, hi = 0;
  };
  std::vector<Range> ranges;
};
// "seq in [2, 16], batch in [1, 1]" or "always" (symbol names from `p`).
std::string guard_to_string(const BucketGuard& g, const Program& p);

// A STATE record (docs/format.md, "STATE"): a tensor the session owns across runs (a KV
// cache), standing for program input `input` (the past) and output `output` (the present =
// Concat(past, new) along `axis`). Its extent on `axis` is symbol `symbol`, bound at each run
// to the committed length; `max_dims` are its extents at their largest (allocated once).
struct StateRecord {
  std::string name;  // the input's name
  uint32_t input = 0, output = 0;  // positions among the programs' inputs / outputs
  uint32_t axis = 0;
  uint32_t symbol = 0;             // index into the common symbol table
  DType dtype = DType::Float;
  std::vector<int64_t> max_dims;
};

struct SectionEntry {
  uint32_t kind = 0;
  uint32_t flags = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t alignment = 1;
  uint32_t checksum = 0;  // CRC-32C (runtime/crc32.h) of the section's bytes
};

// ---- manifest ----
struct ManifestEntry {
  std::string key, value;
};
struct Manifest {
  std::string text;
  std::vector<ManifestEntry> entries;  // in file order; keys may repeat (input, output, ...)
  // First value of `key`, or null.
  const std::string* find(std::string_view key) const;
  std::vector<std::string> find_all(std::string_view key) const;
};
// Checks UTF-8 and the line syntax (docs/format.md, "MANIFEST"); messages name the line.
Status parse_manifest(std::string_view text, Manifest* out);
// "format: 1.0" followed by one "key: value" line per entry. Line breaks inside a value
// would change the meaning of the text, so they are written as spaces.
std::string render_manifest(const std::vector<ManifestEntry>& entries);

// ---- writing ----
struct PackageProgram {
  Program program;    // encoded with encode_program; not verified here
  BucketGuard guard;  // empty for the last (or only) program
};
struct PackageContents {
  std::string manifest;          // text, written verbatim (see render_manifest)
  std::vector<uint8_t> weights;  // the WEIGHTS section
  std::vector<PackageProgram> programs;  // PROGRAMS and BUCKETS, in selection order
  std::string report;            // REPORT section; omitted when empty
  std::vector<uint8_t> ptx;      // PTX section (runtime/ptx_section.h); omitted when empty
  std::vector<StateRecord> states;  // STATE section; omitted when empty
};
// The package bytes. Deterministic: the same contents give the same bytes (padding is zero,
// nothing depends on time or environment). Writing a file atomically is the caller's job.
std::vector<uint8_t> write_package(const PackageContents& contents);
// The package up to where the WEIGHTS section's bytes start (contents.weights is ignored), for
// a WEIGHTS section of `weights_size` bytes whose CRC-32C is `weights_crc`. A writer that
// streams the weights from where they lie appends exactly those bytes after the head:
// write_package(c) == head + c.weights.
std::vector<uint8_t> write_package_head(const PackageContents& contents, uint64_t weights_size,
                                        uint32_t weights_crc);

// ---- loading ----
// An opened, fully verified package. Immutable: safe to share between threads and sessions.
class LoadedPackage {
 public:
  // Maps `path` read-only (MAP_PRIVATE) and verifies it. Refuses non-regular files and empty
  // files. Messages start with the path. Note: like any mmap, truncating the file while it
  // is loaded is unsafe; replace package files by rename, never rewrite them in place.
  static Status open_file(const std::string& path, std::shared_ptr<LoadedPackage>* out);
  // Verifies `size` bytes at `data`. With copy=true the bytes are copied (into 4 KiB
  // aligned memory) and `data` may be freed after the call; with copy=false they are used in
  // place, must stay valid and unchanged while the package lives, and `data` must be 64-byte
  // aligned so the weights are (kInvalidArgument otherwise).
  static Status open_memory(const void* data, size_t size, bool copy,
                            std::shared_ptr<LoadedPackage>* out);

  ~LoadedPackage();
  LoadedPackage(const LoadedPackage&) = delete;
  LoadedPackage& operator=(const LoadedPackage&) = delete;

  uint16_t format_major() const { return format_major_; }
  uint16_t format_minor() const { return format_minor_; }
  uint32_t features() const { return features_; }
  const std::vector<SectionEntry>& sections() const { return sections_; }
  const Manifest& manifest() const { return manifest_; }
  // Every program, in selection order (at least one). They share the symbol table, the
  // inputs and the outputs (checked at load), so program() serves for those.
  const std::vector<Program>& programs() const { return programs_; }
  const std::vector<BucketGuard>& guards() const { return guards_; }
  // The STATE section's records (empty without one), verified against the programs.
  const std::vector<StateRecord>& states() const { return states_; }
  const Program& program() const { return programs_.front(); }
  // The WEIGHTS section, inside the mapping (or copy): 64-byte aligned, read-only.
  const uint8_t* weights() const { return weights_; }
  uint64_t weights_size() const { return weights_size_; }
  const std::string& report() const { return report_; }
  // The PTX section's records (runtime/ptx_section.h); empty when the package has none.
  const std::vector<PtxRecord>& ptx() const { return ptx_; }
  // The whole package.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  LoadedPackage() = default;
  Status verify_and_decode();
  Status decode_programs(const uint8_t* data, uint64_t size);
  Status decode_buckets(const uint8_t* data, uint64_t size);
  Status decode_states(const uint8_t* data, uint64_t size);

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // open_file: the mmap
  size_t mapping_size_ = 0;
  uint8_t* owned_ = nullptr;  // open_memory(copy=true): aligned copy
  uint16_t format_major_ = 0, format_minor_ = 0;
  uint32_t features_ = 0;
  std::vector<SectionEntry> sections_;
  Manifest manifest_;
  std::vector<Program> programs_;
  std::vector<BucketGuard> guards_;
  std::vector<StateRecord> states_;
  std::string report_;
  std::vector<PtxRecord> ptx_;
  const uint8_t* weights_ = nullptr;
  uint64_t weights_size_ = 0;
};

}  // namespace cuvil::rt
