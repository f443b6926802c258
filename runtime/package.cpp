// Package writer and loader (format 3, docs/format.md; the section kinds are
// runtime/sections.def). The loader's checks run in the order
// the bytes are trusted: magic and version first (so a wrong file gets the right message),
// then the header fields, the section table (bounds, alignment, kinds, overlap, padding),
// the checksums, and only then the section contents: manifest text, program decoding, the
// program verifier, and the checks that tie the programs and their guards together. All offset arithmetic goes through support/checked.h.
#include "runtime/package.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>

#include "runtime/byte_reader.h"
#include "runtime/cpu/ops/packed_weights.h"
#include "runtime/crc32.h"
#include "runtime/expr_eval.h"
#include "runtime/verifier.h"
#include "support/checked.h"

namespace cuvil::rt {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the package format is little-endian and is read with memcpy");

constexpr std::align_val_t kCopyAlignment{4096};

template <typename... Parts>
Status invalid(const Parts&... parts) {
  return make_status(StatusCode::kInvalidPackage, parts...);
}

std::string hex(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[v & 15]);
    v >>= 4;
  } while (v);
  return "0x" + s;
}

std::string section_label(size_t index, uint32_t kind) {
  return "section " + std::to_string(index) + " (" + section_kind_name(kind) + ")";
}

// PROGRAMS: u32 count, then per program u64 byte size and encode_program's bytes.
std::vector<uint8_t> encode_programs(const std::vector<PackageProgram>& programs) {
  std::vector<uint8_t> out(4);
  const uint32_t n = static_cast<uint32_t>(programs.size());
  std::memcpy(out.data(), &n, 4);
  for (const PackageProgram& p : programs) {
    const std::vector<uint8_t> bytes = encode_program(p.program);
    const uint64_t size = bytes.size();
    const size_t at = out.size();
    out.resize(at + 8);
    std::memcpy(out.data() + at, &size, 8);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

// BUCKETS: u32 count (= programs), then per program u32 range count and per range
// u32 symbol, u32 zero, i64 lo, i64 hi.
std::vector<uint8_t> encode_buckets(const std::vector<PackageProgram>& programs) {
  std::vector<uint8_t> out;
  auto put = [&](const auto& v) {
    const size_t at = out.size();
    out.resize(at + sizeof v);
    std::memcpy(out.data() + at, &v, sizeof v);
  };
  put(static_cast<uint32_t>(programs.size()));
  for (const PackageProgram& p : programs) {
    put(static_cast<uint32_t>(p.guard.ranges.size()));
    for (const BucketGuard::Range& r : p.guard.ranges) {
      put(r.symbol);
      put(uint32_t{0});
      put(r.lo);
      put(r.hi);
    }
  }
  return out;
}

// STATE: u32 count, then per record u32 input, u32 output, u32 axis, u32 symbol, u32 dtype
// (ONNX number), u32 rank, i64 max_dims[rank], u32 name length, the name's bytes.
std::vector<uint8_t> encode_states(const std::vector<StateRecord>& states) {
  std::vector<uint8_t> out;
  auto put = [&](const auto& v) {
    const size_t at = out.size();
    out.resize(at + sizeof v);
    std::memcpy(out.data() + at, &v, sizeof v);
  };
  put(static_cast<uint32_t>(states.size()));
  for (const StateRecord& s : states) {
    put(s.input);
    put(s.output);
    put(s.axis);
    put(s.symbol);
    put(static_cast<uint32_t>(s.dtype));
    put(static_cast<uint32_t>(s.max_dims.size()));
    for (int64_t d : s.max_dims) put(d);
    put(static_cast<uint32_t>(s.name.size()));
    out.insert(out.end(), s.name.begin(), s.name.end());
  }
  return out;
}

bool same_symbols(const Program& a, const Program& b) {
  if (a.symbols.size() != b.symbols.size()) return false;
  for (size_t i = 0; i < a.symbols.size(); ++i) {
    const Symbol &x = a.symbols[i], &y = b.symbols[i];
    if (x.name != y.name || x.lo != y.lo || x.hi != y.hi || x.data_dependent != y.data_dependent) return false;
  }
  return true;
}

// Inputs (or outputs) of two programs agree in count, name, dtype and dims (as text).
Status same_interface(const Program& a, const Program& b, const std::vector<uint32_t>& ia,
                      const std::vector<uint32_t>& ib, const char* what, size_t index) {
  if (ia.size() != ib.size())
    return invalid("PROGRAMS section: program ", index, " has ", ib.size(), " ", what, "s, program 0 has ",
                   ia.size(), " (all programs must have the same ", what, "s)");
  for (size_t i = 0; i < ia.size(); ++i) {
    const TensorDesc &x = a.tensors[ia[i]], &y = b.tensors[ib[i]];
    bool same = x.name == y.name && x.dtype == y.dtype && x.dims.size() == y.dims.size();
    for (size_t k = 0; same && k < x.dims.size(); ++k)
      same = expr_to_string(a, x.dims[k]) == expr_to_string(b, y.dims[k]);
    if (!same)
      return invalid("PROGRAMS section: program ", index, " ", what, " ", i, " ('", y.name,
                     "') differs from program 0's ('", x.name, "') in name, dtype or shape");
  }
  return Status::ok();
}

template <typename T>
void put_le(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}

// Offset of the first byte that does not start a valid UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or npos.
size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // range of the first continuation byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return i;
    }
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return std::string_view::npos;
}

bool is_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string version_text(uint16_t major, uint16_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

const std::vector<SectionInfo>& section_table() {
  static const std::vector<SectionInfo> table = {
#define CUVIL_SECTION(kind, NAME, presence, critical, align, status, owner, contents) \
  {kind, #NAME, std::string_view(#presence) == "kOnce", critical != 0, align,       \
   std::string_view(#status) == "kReserved", owner, contents},
#include "runtime/sections.def"
#undef CUVIL_SECTION
  };
  return table;
}

const SectionInfo* find_section_info(uint32_t kind) {
  for (const SectionInfo& info : section_table())
    if (info.kind == kind) return &info;
  return nullptr;
}

std::string section_kind_name(uint32_t kind) {
  const SectionInfo* info = find_section_info(kind);
  return info ? info->name : "kind " + std::to_string(kind);
}

std::string guard_to_string(const BucketGuard& g, const Program& p) {
  if (g.ranges.empty()) return "always";
  std::string out;
  for (const BucketGuard::Range& r : g.ranges) {
    if (!out.empty()) out += ", ";
    out += (r.symbol < p.symbols.size() ? p.symbols[r.symbol].name : "symbol " + std::to_string(r.symbol)) +
           " in [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
  }
  return out;
}

// ---- manifest ----

const std::string* Manifest::find(std::string_view key) const {
  for (const ManifestEntry& e : entries)
    if (e.key == key) return &e.value;
  return nullptr;
}

std::vector<std::string> Manifest::find_all(std::string_view key) const {
  std::vector<std::string> out;
  for (const ManifestEntry& e : entries)
    if (e.key == key) out.push_back(e.value);
  return out;
}

Status parse_manifest(std::string_view text, Manifest* out) {
  const size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) return invalid("manifest: invalid UTF-8 at byte ", bad);
  Manifest m;
  m.text = std::string(text);
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    for (unsigned char c : line)
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return invalid("manifest line ", line_no, ": control character ", hex(c));
    if (trim(line).empty() || line.front() == '#') continue;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      return invalid("manifest line ", line_no, ": expected 'key: value'");
    const std::string_view key = line.substr(0, colon);
    if (key.empty() || !std::all_of(key.begin(), key.end(), is_key_char))
      return invalid("manifest line ", line_no, ": invalid key '", key,
                     "' (letters, digits, '_', '-', '.')");
    m.entries.push_back({std::string(key), std::string(trim(line.substr(colon + 1)))});
  }
  *out = std::move(m);
  return Status::ok();
}

std::string render_manifest(const std::vector<ManifestEntry>& entries) {
  std::string out = "format: " + version_text(kFormatMajor, kFormatMinor) + "\n";
  for (const ManifestEntry& e : entries) {
    // Values carry text from the model (producer, names): make them what parse_manifest
    // accepts, so the writer never produces a manifest its own loader rejects. Line breaks
    // become spaces, other control bytes and bytes outside valid UTF-8 become '?'.
    std::string value = e.value;
    for (char& c : value) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '\n' || c == '\r') c = ' ';
      else if ((u < 0x20 && c != '\t') || u == 0x7f) c = '?';
    }
    for (size_t pos = 0; pos < value.size();) {
      const size_t bad = find_invalid_utf8(std::string_view(value).substr(pos));
      if (bad == std::string_view::npos) break;
      value[pos + bad] = '?';
      pos += bad + 1;
    }
    out += e.key + ": " + value + "\n";
  }
  return out;
}

// ---- writing ----

std::vector<uint8_t> write_package(const PackageContents& c) {
  std::vector<uint8_t> out = write_package_head(c, c.weights.size(), crc32c(c.weights.data(), c.weights.size()));
  out.insert(out.end(), c.weights.begin(), c.weights.end());
  return out;
}

std::vector<uint8_t> write_package_head(const PackageContents& c, uint64_t weights_size, uint32_t weights_crc) {
  const std::vector<uint8_t> programs = encode_programs(c.programs);
  const std::vector<uint8_t> buckets = encode_buckets(c.programs);
  const std::vector<uint8_t> states = encode_states(c.states);
  struct Part {
    SectionKind kind;
    uint32_t flags, alignment;
    const uint8_t* data;
    size_t size;
  };
  std::vector<Part> parts = {
      {SectionKind::MANIFEST, kSectionCritical, 8,
       reinterpret_cast<const uint8_t*>(c.manifest.data()), c.manifest.size()},
      {SectionKind::BUCKETS, kSectionCritical, 8, buckets.data(), buckets.size()},
      {SectionKind::PROGRAMS, kSectionCritical, 8, programs.data(), programs.size()},
  };
  if (!c.states.empty())
    parts.push_back({SectionKind::STATE, kSectionCritical, 8, states.data(), states.size()});
  if (!c.report.empty())
    parts.push_back({SectionKind::REPORT, 0, 8, reinterpret_cast<const uint8_t*>(c.report.data()),
                     c.report.size()});
  if (!c.ptx.empty()) parts.push_back({SectionKind::PTX, 0, 8, c.ptx.data(), c.ptx.size()});
  // Weights last: the metadata stays together at the front of the file.
  // Its bytes are not part of the head: data is null, the size and checksum come from the caller.
  parts.push_back({SectionKind::WEIGHTS, kSectionCritical, kWeightsAlignment, nullptr, weights_size});

  std::vector<SectionEntry> table(parts.size());
  uint64_t offset = kHeaderSize + kSectionEntrySize * parts.size();
  for (size_t i = 0; i < parts.size(); ++i) {
    offset = (offset + parts[i].alignment - 1) / parts[i].alignment * parts[i].alignment;
    table[i].kind = static_cast<uint32_t>(parts[i].kind);
    table[i].flags = parts[i].flags;
    table[i].offset = offset;
    table[i].size = parts[i].size;
    table[i].alignment = parts[i].alignment;
    table[i].checksum = parts[i].data ? crc32c(parts[i].data, parts[i].size) : weights_crc;
    offset += parts[i].size;
  }

  // Zero padding everywhere; the head ends where the weights start.
  std::vector<uint8_t> out(table.back().offset, 0);
  std::memcpy(out.data(), kPackageMagic, sizeof kPackageMagic);
  put_le<uint16_t>(out, 8, kFormatMajor);
  put_le<uint16_t>(out, 10, kFormatMinor);
  put_le<uint32_t>(out, 12, kKnownFeatures);
  put_le<uint32_t>(out, 16, static_cast<uint32_t>(parts.size()));
  put_le<uint32_t>(out, 20, kHeaderSize);
  put_le<uint64_t>(out, 24, offset);
  for (size_t i = 0; i < table.size(); ++i) {
    const size_t at = kHeaderSize + kSectionEntrySize * i;
    put_le<uint32_t>(out, at, table[i].kind);
    put_le<uint32_t>(out, at + 4, table[i].flags);
    put_le<uint64_t>(out, at + 8, table[i].offset);
    put_le<uint64_t>(out, at + 16, table[i].size);
    put_le<uint32_t>(out, at + 24, table[i].alignment);
    put_le<uint32_t>(out, at + 28, table[i].checksum);
    if (parts[i].data && parts[i].size) std::memcpy(out.data() + table[i].offset, parts[i].data, parts[i].size);
  }
  return out;
}

// ---- loading ----

LoadedPackage::~LoadedPackage() {
  if (weights_) ops::unregister_weight_region(weights_);
  if (mapping_) ::munmap(mapping_, mapping_size_);
  if (owned_) ::operator delete(owned_, kCopyAlignment);
}

Status LoadedPackage::open_memory(const void* data, size_t size, bool copy,
                                  std::shared_ptr<LoadedPackage>* out) {
  if (!out) return make_status(StatusCode::kInvalidArgument, "open_memory: null output pointer");
  out->reset();
  if (size == 0) return invalid("package is empty (0 bytes)");
  if (!data)
    return make_status(StatusCode::kInvalidArgument, "open_memory: null data with size ", size);
  if (!copy && reinterpret_cast<uintptr_t>(data) % kWeightsAlignment != 0)
    return make_status(StatusCode::kInvalidArgument, "open_memory: package bytes are not ",
                       kWeightsAlignment,
                       "-byte aligned, so the weights cannot be used in "
                       "place; pass copy=true");
  try {
    std::shared_ptr<LoadedPackage> pkg(new LoadedPackage());
    if (copy) {
      pkg->owned_ = static_cast<uint8_t*>(::operator new(size, kCopyAlignment));
      std::memcpy(pkg->owned_, data, size);
      pkg->data_ = pkg->owned_;
    } else {
      pkg->data_ = static_cast<const uint8_t*>(data);
    }
    pkg->size_ = size;
    CUVIL_RETURN_IF_ERROR(pkg->verify_and_decode());
    *out = std::move(pkg);
    return Status::ok();
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "out of memory loading a package of ", size,
                       " bytes");
  }
}

Status LoadedPackage::open_file(const std::string& path, std::shared_ptr<LoadedPackage>* out) {
  if (!out) return make_status(StatusCode::kInvalidArgument, "open_file: null output pointer");
  out->reset();
  auto io_error = [&](const char* what) {
    const std::string reason = std::generic_category().message(errno);
    return make_status(StatusCode::kIo, "cannot ", what, " package '", path, "': ", reason);
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return io_error("open");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = io_error("stat");
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_status(StatusCode::kIo, "package '", path, "' is not a regular file");
  }
  if (st.st_size <= 0) {
    ::close(fd);
    return invalid(path, ": package is empty (0 bytes)");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  std::shared_ptr<LoadedPackage> pkg;
  try {
    pkg.reset(new LoadedPackage());
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return make_status(StatusCode::kOutOfMemory, path, ": out of memory loading the package");
  }
  // The whole package is read at load (the section checksums), weights included, so its pages
  // are faulted in then and never during a run; MAP_POPULATE maps them in one call instead of
  // one page fault at a time (docs/format.md "WEIGHTS").
#ifdef MAP_POPULATE
  constexpr int kMapFlags = MAP_PRIVATE | MAP_POPULATE;
#else
  constexpr int kMapFlags = MAP_PRIVATE;
#endif
  void* map = ::mmap(nullptr, size, PROT_READ, kMapFlags, fd, 0);
  if (map == MAP_FAILED) {
    Status s = io_error("map");
    ::close(fd);
    return s;
  }
  ::close(fd);          // the mapping keeps the file
  pkg->mapping_ = map;  // unmapped by the destructor on every path from here
  pkg->mapping_size_ = size;
  pkg->data_ = static_cast<const uint8_t*>(map);
  pkg->size_ = size;
  try {
    Status s = pkg->verify_and_decode();
    if (!s) return Status(s.code(), path + ": " + s.message());
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, path, ": out of memory loading the package");
  }
  *out = std::move(pkg);
  return Status::ok();
}

Status LoadedPackage::verify_and_decode() {
  const uint8_t* d = data_;
  const uint64_t size = size_;

  // Header.
  if (std::memcmp(d, kPackageMagic, std::min<uint64_t>(size, sizeof kPackageMagic)) != 0)
    return invalid("not a cuvil package: bad magic (expected \"CUVIR\\0\\r\\n\")");
  if (size < kHeaderSize)
    return invalid("package is truncated: ", size, " bytes, the header alone needs ", kHeaderSize);
  ByteReader header(d + sizeof kPackageMagic, kHeaderSize - sizeof kPackageMagic);
  format_major_ = header.read<uint16_t>();
  format_minor_ = header.read<uint16_t>();
  features_ = header.u32();
  const uint32_t section_count = header.u32();
  const uint32_t header_size = header.u32();
  const uint64_t file_size = header.u64();
  const std::string version = version_text(format_major_, format_minor_);
  if (format_major_ > kFormatMajor)
    return invalid("package format ", version, " is newer than this runtime supports (",
                   kFormatMajor, ".x)");
  if (format_major_ < kFormatMajor)
    return invalid("package format ", version, " is older than this runtime supports (",
                   kFormatMajor, ".x): compile the model again with this version of cuvilc");
  if (features_ & ~kKnownFeatures)
    return invalid("package needs feature bits ", hex(features_ & ~kKnownFeatures),
                   " that this runtime (format ", version_text(kFormatMajor, kFormatMinor),
                   ") does not know");
  if (header_size < kHeaderSize || header_size % 8 != 0)
    return invalid("header size ", header_size, " is invalid (a multiple of 8, at least ",
                   kHeaderSize, ")");
  if (file_size != size)
    return invalid("package size mismatch: the header says ", file_size, " bytes, got ", size,
                   file_size > size ? " (truncated)" : " (extra bytes)");
  if (section_count > kMaxSections)
    return invalid("section count ", section_count, " exceeds the limit ", kMaxSections);
  const uint64_t table_end = uint64_t{header_size} + uint64_t{kSectionEntrySize} * section_count;
  if (table_end > size)
    return invalid("section table (", section_count, " entries at offset ", header_size,
                   ") extends past the end of the package (", size, " bytes)");

  // Section table.
  sections_.assign(section_count, SectionEntry{});
  ByteReader table(d + header_size, table_end - header_size);
  std::vector<size_t> count_of(section_table().size(), 0);  // per row of the table
  for (size_t i = 0; i < section_count; ++i) {
    SectionEntry& s = sections_[i];
    s.kind = table.u32();
    s.flags = table.u32();
    s.offset = table.u64();
    s.size = table.u64();
    s.alignment = table.u32();
    s.checksum = table.u32();
    const std::string label = section_label(i, s.kind);
    if (s.flags & ~kSectionCritical)
      return invalid(label, ": reserved flag bits ", hex(s.flags & ~kSectionCritical), " are set");
    const SectionInfo* info = find_section_info(s.kind);
    if (!info && (s.flags & kSectionCritical))
      return invalid(label, ": unknown critical section kind ", s.kind,
                     " (this runtime reads format ", version_text(kFormatMajor, kFormatMinor), ")");
    if (info && info->reserved && (s.flags & kSectionCritical))
      return invalid(label, ": this section kind is reserved for ", info->owner,
                     " and this runtime does not read it yet");
    if (s.alignment == 0 || (s.alignment & (s.alignment - 1)) != 0 ||
        s.alignment > kMaxSectionAlignment)
      return invalid(label, ": alignment ", s.alignment, " is not a power of two in [1, ",
                     kMaxSectionAlignment, "]");
    if (!range_within(s.offset, s.size, size))
      return invalid(label, ": offset ", s.offset, " + size ", s.size,
                     " extends past the end of the package (", size, " bytes)");
    if (s.offset < table_end)
      return invalid(label, ": offset ", s.offset,
                     " overlaps the header and section table (which end at ", table_end, ")");
    if (s.offset % s.alignment != 0)
      return invalid(label, ": offset ", s.offset, " is not a multiple of its alignment ",
                     s.alignment);
    if (info) {
      ++count_of[static_cast<size_t>(info - section_table().data())];
      if (info->critical && !(s.flags & kSectionCritical))
        return invalid(label, ": must be flagged critical");
      if (s.alignment < info->min_alignment)
        return invalid(label, ": alignment ", s.alignment, " is below the required ",
                       info->min_alignment);
    }
  }
  for (size_t row = 0; row < section_table().size(); ++row) {
    const SectionInfo& info = section_table()[row];
    if (count_of[row] == 0 && info.once)
      return invalid("the ", info.name, " section is missing");
    if (count_of[row] > 1)
      return invalid("the ", info.name, " section appears ", count_of[row], " times (at most once)");
  }

  // No two sections share a byte; every byte outside the sections is zero padding.
  std::vector<size_t> order(section_count);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const SectionEntry &x = sections_[a], &y = sections_[b];
    return x.offset != y.offset ? x.offset < y.offset : x.size < y.size;
  });
  uint64_t cursor = table_end;
  auto check_padding = [&](uint64_t from, uint64_t to) -> Status {
    for (uint64_t o = from; o < to; ++o)
      if (d[o] != 0)
        return invalid("nonzero byte at offset ", o,
                       " outside every section (padding must be zero)");
    return Status::ok();
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const SectionEntry& s = sections_[order[k]];
    if (k > 0) {
      const SectionEntry& prev = sections_[order[k - 1]];
      if (prev.offset + prev.size > s.offset)  // sums checked by range_within above
        return invalid(section_label(order[k - 1], prev.kind), " [", prev.offset, ", ",
                       prev.offset + prev.size, ") overlaps ", section_label(order[k], s.kind),
                       " [", s.offset, ", ", s.offset + s.size, ")");
    }
    if (s.offset > cursor) CUVIL_RETURN_IF_ERROR(check_padding(cursor, s.offset));
    cursor = std::max(cursor, s.offset + s.size);
  }
  CUVIL_RETURN_IF_ERROR(check_padding(cursor, size));

  // Checksums, before any section's contents are interpreted.
  for (size_t i = 0; i < section_count; ++i) {
    const SectionEntry& s = sections_[i];
    const uint32_t actual = crc32c(d + s.offset, s.size);
    if (actual != s.checksum)
      return invalid(section_label(i, s.kind), ": checksum mismatch (stored ", hex(s.checksum),
                     ", computed ", hex(actual), "); the package is corrupt");
  }

  // Contents.
  const SectionEntry* programs = nullptr;
  const SectionEntry* buckets = nullptr;
  const SectionEntry* states = nullptr;
  for (const SectionEntry& s : sections_) {
    const char* bytes = reinterpret_cast<const char*>(d + s.offset);
    switch (static_cast<SectionKind>(s.kind)) {
      case SectionKind::MANIFEST: {
        Status st = parse_manifest(std::string_view(bytes, s.size), &manifest_);
        if (!st) return invalid("MANIFEST section: ", st.message());
        break;
      }
      case SectionKind::WEIGHTS:
        weights_ = d + s.offset;
        weights_size_ = s.size;
        // GEMM operands among the weights are packed once per package (packed_weights.h).
        ops::register_weight_region(weights_, weights_size_);
        break;
      case SectionKind::PROGRAMS: programs = &s; break;
      case SectionKind::BUCKETS: buckets = &s; break;
      case SectionKind::STATE: states = &s; break;
      case SectionKind::REPORT: report_.assign(bytes, s.size); break;
      case SectionKind::PTX: {
        Status st = decode_ptx_section(d + s.offset, s.size, &ptx_);
        if (!st) return st;
        break;
      }
      default: break;  // unknown or reserved, non-critical: skipped
    }
  }
  if (const std::string* declared = manifest_.find("format"); declared && *declared != version)
    return invalid("MANIFEST section: says format ", *declared, ", the header says ", version);
  CUVIL_RETURN_IF_ERROR(decode_programs(d + programs->offset, programs->size));
  CUVIL_RETURN_IF_ERROR(decode_buckets(d + buckets->offset, buckets->size));
  return states ? decode_states(d + states->offset, states->size) : Status::ok();
}

Status LoadedPackage::decode_programs(const uint8_t* data, uint64_t size) {
  ByteReader r(data, size);
  // Each program takes at least its 8-byte size field.
  const uint32_t n = r.count(8);
  if (r.failed()) return invalid("PROGRAMS section: truncated program count");
  if (n == 0) return invalid("PROGRAMS section: holds no program");
  if (n > kMaxPrograms) return invalid("PROGRAMS section: ", n, " programs exceed the limit ", kMaxPrograms);
  programs_.assign(n, Program{});
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t bytes = r.u64();
    if (r.failed() || bytes > r.remaining())
      return invalid("PROGRAMS section: program ", i, " extends past the end of the section");
    std::string error;
    if (!decode_program(data + r.position(), static_cast<size_t>(bytes), &programs_[i], &error))
      return invalid("PROGRAMS section: program ", i, ": ", error);
    r.skip(static_cast<size_t>(bytes));
    Status verified = verify_program(programs_[i], weights_size_);
    if (!verified) return invalid("PROGRAMS section: program ", i, ": ", verified.message());
    if (i == 0) continue;
    if (!same_symbols(programs_[0], programs_[i]))
      return invalid("PROGRAMS section: program ", i,
                     "'s symbol table differs from program 0's (all programs share one)");
    CUVIL_RETURN_IF_ERROR(same_interface(programs_[0], programs_[i], programs_[0].inputs, programs_[i].inputs, "input", i));
    CUVIL_RETURN_IF_ERROR(same_interface(programs_[0], programs_[i], programs_[0].outputs, programs_[i].outputs, "output", i));
  }
  if (r.remaining() != 0)
    return invalid("PROGRAMS section: ", r.remaining(), " bytes after the last program");
  return Status::ok();
}

Status LoadedPackage::decode_buckets(const uint8_t* data, uint64_t size) {
  ByteReader r(data, size);
  const uint32_t n = r.count(4);
  if (r.failed()) return invalid("BUCKETS section: truncated guard count");
  if (n != programs_.size())
    return invalid("BUCKETS section: ", n, " guards for ", programs_.size(), " programs (one per program)");
  const Program& p = programs_.front();
  guards_.assign(n, BucketGuard{});
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t ranges = r.count(24);
    if (r.failed()) return invalid("BUCKETS section: guard ", i, " is truncated");
    if (i + 1 == n && ranges != 0)
      return invalid("BUCKETS section: the last program's guard must be empty (it takes every shape "
                     "the earlier guards do not), but it has ", ranges, " ranges");
    std::vector<uint8_t> seen(p.symbols.size(), 0);
    for (uint32_t k = 0; k < ranges; ++k) {
      BucketGuard::Range g;
      g.symbol = r.u32();
      const uint32_t zero = r.u32();
      g.lo = r.i64();
      g.hi = r.i64();
      if (r.failed()) return invalid("BUCKETS section: guard ", i, " is truncated");
      const std::string who = "BUCKETS section: guard " + std::to_string(i) + " range " + std::to_string(k);
      if (zero != 0) return invalid(who, ": reserved field is ", zero, " (must be 0)");
      if (g.symbol >= p.symbols.size())
        return invalid(who, ": symbol ", g.symbol, " out of range (", p.symbols.size(), " symbols)");
      const Symbol& s = p.symbols[g.symbol];
      if (s.data_dependent)
        return invalid(who, ": symbol '", s.name, "' is data-dependent (a guard needs a symbol bound by the inputs)");
      if (seen[g.symbol]++) return invalid(who, ": symbol '", s.name, "' appears twice in one guard");
      if (g.lo > g.hi || g.lo < s.lo || g.hi > s.hi)
        return invalid(who, ": range [", g.lo, ", ", g.hi, "] of '", s.name,
                       "' is empty or outside its declared range [", s.lo, ", ", s.hi, "]");
      guards_[i].ranges.push_back(g);
    }
  }
  if (r.remaining() != 0) return invalid("BUCKETS section: ", r.remaining(), " bytes after the last guard");
  return Status::ok();
}

// Every record must stand for an input/output pair of the programs that the session can keep:
// same dtype and rank, the input's extent on `axis` exactly the length symbol, every other
// extent a constant equal to max_dims or a symbol whose declared maximum is max_dims, the
// length symbol bounded by max_dims[axis]; inputs, outputs and names used once.
Status LoadedPackage::decode_states(const uint8_t* data, uint64_t size) {
  ByteReader r(data, size);
  const Program& p = programs_.front();
  const uint32_t n = r.count(28);
  if (r.failed()) return invalid("STATE section: truncated record count");
  if (n == 0) return invalid("STATE section: holds no record (omit the section instead)");
  if (n > p.inputs.size()) return invalid("STATE section: ", n, " records for ", p.inputs.size(), " inputs");
  ExprEvaluator eval(p);
  std::vector<uint8_t> input_used(p.inputs.size(), 0), output_used(p.outputs.size(), 0);
  states_.assign(n, StateRecord{});
  for (uint32_t i = 0; i < n; ++i) {
    StateRecord& s = states_[i];
    const std::string who = "STATE section: record " + std::to_string(i);
    s.input = r.u32();
    s.output = r.u32();
    s.axis = r.u32();
    s.symbol = r.u32();
    const uint32_t dtype = r.u32();
    const uint32_t rank = r.count(8);
    if (r.failed()) return invalid(who, " is truncated");
    if (rank == 0 || rank > 16) return invalid(who, ": rank ", rank, " (1 to 16)");
    s.max_dims.resize(rank);
    for (int64_t& d : s.max_dims) d = r.i64();
    s.name = r.str();
    if (r.failed()) return invalid(who, " is truncated");
    if (s.input >= p.inputs.size()) return invalid(who, ": input ", s.input, " out of range (", p.inputs.size(), " inputs)");
    if (s.output >= p.outputs.size())
      return invalid(who, ": output ", s.output, " out of range (", p.outputs.size(), " outputs)");
    if (input_used[s.input]++) return invalid(who, ": input ", s.input, " is already another record's");
    if (output_used[s.output]++) return invalid(who, ": output ", s.output, " is already another record's");
    const TensorDesc& in = p.tensors[p.inputs[s.input]];
    const TensorDesc& out = p.tensors[p.outputs[s.output]];
    if (s.name != in.name) return invalid(who, ": name '", s.name, "' is not its input's ('", in.name, "')");
    s.dtype = static_cast<DType>(dtype);
    if (dtype_bits(s.dtype) <= 0 || dtype_bits(s.dtype) % 8 != 0 || s.dtype != in.dtype || s.dtype != out.dtype)
      return invalid(who, " ('", s.name, "'): dtype ", dtype, " differs from its input's and output's");
    if (in.dims.size() != rank || out.dims.size() != rank)
      return invalid(who, " ('", s.name, "'): rank ", rank, " differs from its input's or output's");
    if (s.axis >= rank) return invalid(who, " ('", s.name, "'): axis ", s.axis, " out of range for rank ", rank);
    if (s.symbol >= p.symbols.size())
      return invalid(who, " ('", s.name, "'): symbol ", s.symbol, " out of range (", p.symbols.size(), " symbols)");
    for (uint32_t k = 0; k < rank; ++k) {
      const uint32_t sym = eval.as_symbol(in.dims[k]);
      int64_t value = 0;
      bool unbound = false;
      if (k == s.axis) {
        if (sym != s.symbol)
          return invalid(who, " ('", s.name, "'): dim ", k, " of the input is ", eval.to_string(in.dims[k]),
                         ", not the length symbol '", p.symbols[s.symbol].name, "'");
        const Symbol& ls = p.symbols[s.symbol];
        if (ls.data_dependent || ls.hi != s.max_dims[k] || ls.lo < 0)
          return invalid(who, " ('", s.name, "'): length symbol '", ls.name, "' has range [", ls.lo, ", ",
                         ls.hi == INT64_MAX ? std::string("unbounded") : std::to_string(ls.hi),
                         "] but the record's maximum is ", s.max_dims[k]);
        continue;
      }
      if (sym != kNone) {
        if (p.symbols[sym].hi != s.max_dims[k])
          return invalid(who, " ('", s.name, "'): dim ", k, " maximum ", s.max_dims[k], " is not the range maximum of '",
                         p.symbols[sym].name, "'");
        continue;
      }
      Status st = eval.eval(in.dims[k], &value, &unbound);
      if (!st || unbound || value != s.max_dims[k])
        return invalid(who, " ('", s.name, "'): dim ", k, " of the input is ", eval.to_string(in.dims[k]),
                       ", not the constant ", s.max_dims[k], " or a symbol");
    }
    const std::optional<int64_t> numel = checked_numel(s.max_dims);
    if (!numel || *numel < 0 || *numel > (int64_t{1} << 40) / (dtype_bits(s.dtype) / 8))
      return invalid(who, " ('", s.name, "'): maximum extents are too large");
    if (s.symbol != states_[0].symbol)
      return invalid(who, " ('", s.name, "'): length symbol '", p.symbols[s.symbol].name, "' differs from record 0's");
  }
  if (r.remaining() != 0) return invalid("STATE section: ", r.remaining(), " bytes after the last record");
  return Status::ok();
}

}  // namespace cuvil::rt
