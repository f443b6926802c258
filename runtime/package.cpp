// Package writer and loader (format 1, docs/format.md). The loader's checks run in the order
// the bytes are trusted: magic and version first (so a wrong file gets the right message),
// then the header fields, the section table (bounds, alignment, kinds, overlap, padding),
// the checksums, and only then the section contents: manifest text, program decoding, and
// the program verifier. All offset arithmetic goes through support/checked.h.
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

bool is_known_kind(uint32_t kind) {
  return kind >= static_cast<uint32_t>(SectionKind::kManifest) &&
         kind <= static_cast<uint32_t>(SectionKind::kReport);
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

std::string section_kind_name(uint32_t kind) {
  switch (static_cast<SectionKind>(kind)) {
    case SectionKind::kManifest: return "MANIFEST";
    case SectionKind::kWeights: return "WEIGHTS";
    case SectionKind::kProgram: return "PROGRAM";
    case SectionKind::kReport: return "REPORT";
  }
  return "kind " + std::to_string(kind);
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
  const std::vector<uint8_t> program = encode_program(c.program);
  struct Part {
    SectionKind kind;
    uint32_t flags, alignment;
    const uint8_t* data;
    size_t size;
  };
  std::vector<Part> parts = {
      {SectionKind::kManifest, kSectionCritical, 8,
       reinterpret_cast<const uint8_t*>(c.manifest.data()), c.manifest.size()},
      {SectionKind::kProgram, kSectionCritical, 8, program.data(), program.size()},
  };
  if (!c.report.empty())
    parts.push_back({SectionKind::kReport, 0, 8, reinterpret_cast<const uint8_t*>(c.report.data()),
                     c.report.size()});
  // Weights last: the metadata stays together at the front of the file.
  // Its bytes are not part of the head: data is null, the size and checksum come from the caller.
  parts.push_back({SectionKind::kWeights, kSectionCritical, kWeightsAlignment, nullptr, weights_size});

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
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
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
                   kFormatMajor, ".x)");
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
  size_t count_of[5] = {0, 0, 0, 0, 0};  // per known kind
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
    if (!is_known_kind(s.kind) && (s.flags & kSectionCritical))
      return invalid(label, ": unknown critical section kind ", s.kind,
                     " (this runtime reads format ", version_text(kFormatMajor, kFormatMinor), ")");
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
    if (is_known_kind(s.kind)) {
      ++count_of[s.kind];
      const bool optional = s.kind == static_cast<uint32_t>(SectionKind::kReport);
      if (!optional && !(s.flags & kSectionCritical))
        return invalid(label, ": must be flagged critical");
      if (s.kind == static_cast<uint32_t>(SectionKind::kWeights) && s.alignment < kWeightsAlignment)
        return invalid(label, ": alignment ", s.alignment, " is below the required ",
                       kWeightsAlignment);
    }
  }
  for (uint32_t kind = 1; kind <= 4; ++kind) {
    const bool optional = kind == static_cast<uint32_t>(SectionKind::kReport);
    if (count_of[kind] == 0 && !optional)
      return invalid("the ", section_kind_name(kind), " section is missing");
    if (count_of[kind] > 1)
      return invalid("the ", section_kind_name(kind), " section appears ", count_of[kind],
                     " times (at most once)");
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
  const SectionEntry* program = nullptr;
  for (const SectionEntry& s : sections_) {
    const char* bytes = reinterpret_cast<const char*>(d + s.offset);
    switch (static_cast<SectionKind>(s.kind)) {
      case SectionKind::kManifest: {
        Status st = parse_manifest(std::string_view(bytes, s.size), &manifest_);
        if (!st) return invalid("MANIFEST section: ", st.message());
        break;
      }
      case SectionKind::kWeights:
        weights_ = d + s.offset;
        weights_size_ = s.size;
        // GEMM operands among the weights are packed once per package (packed_weights.h).
        ops::register_weight_region(weights_, weights_size_);
        break;
      case SectionKind::kProgram: program = &s; break;
      case SectionKind::kReport: report_.assign(bytes, s.size); break;
      default: break;  // unknown, non-critical: skipped
    }
  }
  if (const std::string* declared = manifest_.find("format"); declared && *declared != version)
    return invalid("MANIFEST section: says format ", *declared, ", the header says ", version);
  std::string error;
  if (!decode_program(d + program->offset, program->size, &program_, &error))
    return invalid("PROGRAM section: ", error);
  Status verified = verify_program(program_, weights_size_);
  if (!verified) return invalid("PROGRAM section: ", verified.message());
  return Status::ok();
}

}  // namespace cuvil::rt
