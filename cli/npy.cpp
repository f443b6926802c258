#include "cli/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "support/checked.h"
#include "support/error.h"
#include "support/output_file.h"

namespace cuvil::tools {
namespace {

constexpr size_t kMaxHeader = 1 << 16;
// A TensorProto .pb file is one protobuf message, which protobuf caps at 2 GiB - 1 bytes;
// larger inputs come as .npy, whose data is not parsed.
constexpr uint64_t kMaxTensorProtoBytes = (uint64_t{1} << 31) - 1;

struct NpyType {
  const char* descr;
  int32_t onnx;
  int size;
};
const NpyType kTypes[] = {
    {"<f4", 1, 4}, {"|u1", 2, 1}, {"|i1", 3, 1}, {"<u2", 4, 2}, {"<i2", 5, 2}, {"<i4", 6, 4},
    {"<i8", 7, 8}, {"|b1", 9, 1}, {"<f2", 10, 2}, {"<f8", 11, 8}, {"<u4", 12, 4}, {"<u8", 13, 8},
    {"<c8", 14, 8}, {"<c16", 15, 16},
};

const NpyType* type_by_onnx(int32_t t) {
  for (const auto& k : kTypes)
    if (k.onnx == t) return &k;
  return nullptr;
}

// Value of `'key': value` in the header dict, as raw text up to the next top-level comma.
bool dict_value(const std::string& h, const std::string& key, std::string* out) {
  auto k = h.find("'" + key + "'");
  if (k == std::string::npos) return false;
  auto colon = h.find(':', k);
  if (colon == std::string::npos) return false;
  size_t i = colon + 1;
  while (i < h.size() && h[i] == ' ') ++i;
  size_t j = i;
  int depth = 0;
  for (; j < h.size(); ++j) {
    char c = h[j];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' || c == '}') && depth == 0) break;
  }
  while (j > i && h[j - 1] == ' ') --j;
  *out = h.substr(i, j - i);
  return true;
}

// What a .npy header says: the element type, the shape, and where and how long the data is.
struct NpyHeader {
  const NpyType* type = nullptr;
  std::vector<int64_t> dims;
  std::string descr, shape_text;
  size_t data_offset = 0;
  uint64_t data_bytes = 0;  // numel x element size, without overflow
};

// Parses the preamble and header dict from the first `size` bytes of a file (enough when they
// hold the whole header: the header is at most 12 + kMaxHeader bytes).
std::string parse_npy_header(const std::string& name, const uint8_t* data, size_t size, NpyHeader* out) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) return name + ": not a .npy file (bad magic)";
  uint8_t major = data[6];
  size_t header_len, pos;
  if (major == 1) {
    header_len = data[8] | (static_cast<size_t>(data[9]) << 8);
    pos = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return name + ": truncated header";
    header_len = data[8] | (static_cast<size_t>(data[9]) << 8) | (static_cast<size_t>(data[10]) << 16) |
                 (static_cast<size_t>(data[11]) << 24);
    pos = 12;
  } else {
    return name + ": unsupported .npy version " + std::to_string(major);
  }
  if (header_len > kMaxHeader) return name + ": header length " + std::to_string(header_len) + " is too large";
  if (!range_within(pos, header_len, size)) return name + ": truncated header";
  std::string h(reinterpret_cast<const char*>(data + pos), header_len);
  out->data_offset = pos + header_len;
  std::string descr, fortran, shape;
  if (!dict_value(h, "descr", &descr) || !dict_value(h, "fortran_order", &fortran) || !dict_value(h, "shape", &shape))
    return name + ": header lacks descr, fortran_order or shape";
  if (descr.size() < 2 || (descr[0] != '\'' && descr[0] != '"')) return name + ": bad descr " + descr;
  descr = descr.substr(1, descr.size() - 2);
  if (fortran == "True") return name + ": Fortran-order arrays are not supported (use np.ascontiguousarray)";
  if (fortran != "False") return name + ": bad fortran_order value '" + fortran + "' (expected True or False)";
  if (!descr.empty() && descr[0] == '>') return name + ": big-endian dtype " + descr + " is not supported";
  if (descr.size() == 3 && descr[0] == '=') descr[0] = '<';
  const NpyType* type = nullptr;
  for (const auto& k : kTypes)
    if (descr == k.descr || (descr[0] == '<' && descr.substr(1) == std::string(k.descr).substr(1) && k.descr[0] == '|'))
      type = &k;
  if (!type) return name + ": unsupported dtype '" + descr + "'";
  out->type = type;
  out->descr = descr;
  out->shape_text = shape;
  out->dims.clear();
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') return name + ": bad shape " + shape;
  std::string inner = shape.substr(1, shape.size() - 2);
  size_t i = 0;
  while (i < inner.size()) {
    while (i < inner.size() && (inner[i] == ' ' || inner[i] == ',')) ++i;
    if (i >= inner.size()) break;
    size_t j = i;
    while (j < inner.size() && std::isdigit(static_cast<unsigned char>(inner[j]))) ++j;
    if (j == i || j - i > 18) return name + ": bad shape " + shape;
    out->dims.push_back(std::stoll(inner.substr(i, j - i)));
    i = j;
    if (out->dims.size() > 32) return name + ": too many dims";
  }
  auto numel = checked_numel(out->dims);
  if (!numel) return name + ": shape product overflows";
  auto bytes = checked_mul(*numel, type->size);
  if (!bytes) return name + ": byte size overflows";
  out->data_bytes = static_cast<uint64_t>(*bytes);
  return "";
}

// The data must be exactly what the header asks for: neither shorter nor longer.
std::string check_npy_data_size(const std::string& name, const NpyHeader& h, uint64_t file_size) {
  uint64_t have = file_size - h.data_offset;  // the header lies within the file
  if (have != h.data_bytes)
    return name + ": data has " + std::to_string(have) + " bytes but shape " + h.shape_text + " of " + h.descr +
           " needs " + std::to_string(h.data_bytes);
  return "";
}

// Opens `path` for reading if it is a regular file (O_NONBLOCK: a FIFO must not block the
// open) and gives its size; -1 and `*err` otherwise.
int open_regular(const std::string& path, uint64_t* size, std::string* err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *err = path + ": cannot open: " + std::strerror(errno);
    return -1;
  }
  struct stat sb;
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    *err = path + ": cannot open: not a regular file";
    return -1;
  }
  *size = static_cast<uint64_t>(sb.st_size);
  return fd;
}

// Reads exactly `size` bytes at `offset` into `out` (already sized); a file that ends early
// (it shrank after fstat) is an error, not a short tensor.
std::string read_exactly(int fd, const std::string& path, uint64_t offset, uint8_t* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return path + ": read failed: " + std::strerror(errno);
    if (n == 0) return path + ": file ended at byte " + std::to_string(offset + done) + " while reading it";
    done += static_cast<size_t>(n);
  }
  return "";
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

std::string parse_npy(const std::string& name, const uint8_t* data, size_t size, HostTensor* out) {
  NpyHeader h;
  std::string err = parse_npy_header(name, data, size, &h);
  if (err.empty()) err = check_npy_data_size(name, h, size);
  if (!err.empty()) return err;
  out->dtype = h.type->onnx;
  out->dims = std::move(h.dims);
  out->bytes.assign(data + h.data_offset, data + size);
  return "";
}

// The header first, then its size against the file's (fstat), and only then the data: a
// small file with a huge shape, or a huge file with a small shape, is refused without
// allocating or reading the data.
std::string read_npy(const std::string& path, HostTensor* out) {
  std::string err;
  uint64_t file_size = 0;
  int fd = open_regular(path, &file_size, &err);
  if (fd < 0) return err;
  FdCloser closer{fd};
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(file_size, 12 + kMaxHeader)));
  err = read_exactly(fd, path, 0, head.data(), head.size());
  if (!err.empty()) return err;
  NpyHeader h;
  err = parse_npy_header(path, head.data(), head.size(), &h);
  if (err.empty()) err = check_npy_data_size(path, h, file_size);
  if (!err.empty()) return err;
  out->dtype = h.type->onnx;
  out->dims = std::move(h.dims);
  out->bytes.resize(static_cast<size_t>(h.data_bytes));
  return read_exactly(fd, path, h.data_offset, out->bytes.data(), out->bytes.size());
}

std::string write_npy(const std::string& path, const HostTensor& t) {
  const NpyType* type = type_by_onnx(t.dtype);
  if (!type) return path + ": dtype " + std::to_string(t.dtype) + " cannot be written as .npy";
  auto numel = checked_numel(t.dims);
  auto need = numel ? checked_mul(*numel, type->size) : std::nullopt;
  if (!need || static_cast<uint64_t>(*need) != t.bytes.size())
    return path + ": " + std::to_string(t.bytes.size()) + " bytes of data do not match the shape";
  std::string shape = "(";
  for (size_t i = 0; i < t.dims.size(); ++i) shape += std::to_string(t.dims[i]) + (t.dims.size() == 1 || i + 1 < t.dims.size() ? "," : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + type->descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string file("\x93NUMPY\x01\x00", 8);
  uint16_t hl = static_cast<uint16_t>(header.size());
  file += static_cast<char>(hl & 0xff);
  file += static_cast<char>(hl >> 8);
  file += header;
  file.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  // Atomically, like cuvilc's outputs: a failed or killed run leaves an older file intact.
  try {
    write_file_atomically(path, file);
  } catch (const Diagnostic& d) {
    return d.what();
  }
  return "";
}

// ---- TensorProto wire format ----
namespace {
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) { ok = false; return 0; }
      uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
};

// TensorProto field numbers (onnx.proto) and the typed-data field each data_type uses.
enum : uint32_t {
  kDims = 1, kDataType = 2, kFloatData = 4, kInt32Data = 5, kInt64Data = 7, kRawData = 9,
  kDoubleData = 10, kUint64Data = 11, kExternalData = 13, kDataLocation = 14,
};

const char* typed_field_name(uint32_t field) {
  switch (field) {
    case kFloatData: return "float_data";
    case kInt32Data: return "int32_data";
    case kInt64Data: return "int64_data";
    case kDoubleData: return "double_data";
    case kUint64Data: return "uint64_data";
    default: return "?";
  }
}

uint32_t typed_field_for(int32_t dtype) {
  switch (dtype) {
    case 1: case 14: return kFloatData;    // float, complex64
    case 11: case 15: return kDoubleData;  // double, complex128
    case 7: return kInt64Data;
    case 12: case 13: return kUint64Data;  // uint32, uint64
    default: return kInt32Data;            // the narrow integer types, bool, float16
  }
}
}  // namespace

std::string parse_tensor_pb(const std::string& name, const uint8_t* data, size_t size, HostTensor* out) {
  Wire w{data, data + size};
  out->dims.clear();
  out->bytes.clear();
  out->dtype = 0;
  std::vector<uint8_t> raw;
  bool have_raw = false, external = false;
  uint32_t typed_field = 0;     // the typed-data field seen, if any
  std::string conflict;         // a second, different typed-data field
  std::vector<uint64_t> ints;   // int32/int64/uint64 typed data (varints)
  std::vector<uint8_t> fixed;   // float/double typed data
  // Reads a length-delimited payload; null when truncated.
  auto payload = [&](uint64_t* len) -> const uint8_t* {
    *len = w.varint();
    if (!w.ok || *len > static_cast<uint64_t>(w.end - w.p)) {
      w.ok = false;
      return nullptr;
    }
    const uint8_t* begin = w.p;
    w.p += *len;
    return begin;
  };
  while (w.ok && w.p < w.end) {
    uint64_t key = w.varint();
    if (!w.ok) break;
    const uint64_t field64 = key >> 3;
    const uint32_t type = key & 7;
    if (field64 == 0 || field64 > 0x1fffffff) { w.ok = false; break; }
    const uint32_t field = static_cast<uint32_t>(field64);
    auto typed = [&](bool is_fixed, int width) {
      if (typed_field && typed_field != field) conflict = std::string(typed_field_name(typed_field)) + " and " + typed_field_name(field);
      typed_field = field;
      if (type == 2) {
        uint64_t len = 0;
        const uint8_t* p = payload(&len);
        if (!p) return;
        if (is_fixed) {
          if (len % static_cast<uint64_t>(width)) { w.ok = false; return; }
          fixed.insert(fixed.end(), p, p + len);
        } else {
          Wire inner{p, p + len};
          while (inner.ok && inner.p < inner.end) ints.push_back(inner.varint());
          if (!inner.ok) w.ok = false;
        }
      } else if (is_fixed && ((type == 5 && width == 4) || (type == 1 && width == 8))) {
        if (w.end - w.p < width) { w.ok = false; return; }
        fixed.insert(fixed.end(), w.p, w.p + width);
        w.p += width;
      } else if (!is_fixed && type == 0) {
        ints.push_back(w.varint());
      } else {
        w.ok = false;
      }
    };
    switch (field) {
      case kDims:
        if (type == 2) {
          uint64_t len = 0;
          const uint8_t* p = payload(&len);
          if (!p) break;
          Wire inner{p, p + len};
          while (inner.ok && inner.p < inner.end) out->dims.push_back(static_cast<int64_t>(inner.varint()));
          if (!inner.ok) w.ok = false;
        } else if (type == 0) {
          out->dims.push_back(static_cast<int64_t>(w.varint()));
        } else {
          w.ok = false;
        }
        if (out->dims.size() > 64) return name + ": more than 64 dims";
        break;
      case kDataType:
        if (type != 0) { w.ok = false; break; }
        out->dtype = static_cast<int32_t>(w.varint());
        break;
      case kFloatData: typed(true, 4); break;
      case kDoubleData: typed(true, 8); break;
      case kInt32Data: case kInt64Data: case kUint64Data: typed(false, 0); break;
      case kRawData: {
        if (type != 2) { w.ok = false; break; }
        uint64_t len = 0;
        const uint8_t* p = payload(&len);
        if (!p) break;
        raw.assign(p, p + len);
        have_raw = true;
        break;
      }
      case kDataLocation:
        if (type != 0) { w.ok = false; break; }
        if (w.varint() == 1) external = true;
        break;
      case kExternalData:
        external = true;
        [[fallthrough]];
      default:  // skip
        if (type == 0) w.varint();
        else if (type == 1) { if (w.end - w.p < 8) w.ok = false; else w.p += 8; }
        else if (type == 5) { if (w.end - w.p < 4) w.ok = false; else w.p += 4; }
        else if (type == 2) { uint64_t len = 0; payload(&len); }
        else w.ok = false;  // groups (3, 4) and wire types 6, 7
    }
  }
  if (!w.ok) return name + ": not a valid TensorProto (truncated or malformed)";
  if (external) return name + ": tensors with external data are not supported here (store the data in raw_data)";
  const NpyType* type = type_by_onnx(out->dtype);
  if (!type) return name + ": unsupported data_type " + std::to_string(out->dtype);
  for (int64_t d : out->dims)
    if (d < 0) return name + ": negative dim " + std::to_string(d);
  auto numel = checked_numel(out->dims);
  if (!numel) return name + ": shape product overflows";
  auto bytes = checked_mul(*numel, type->size);
  if (!bytes) return name + ": byte size overflows";
  if (!conflict.empty()) return name + ": has typed data in both " + conflict;
  if (have_raw && typed_field)
    return name + ": has both raw_data and " + typed_field_name(typed_field) + "; a tensor holds one of them";
  if (typed_field && typed_field != typed_field_for(out->dtype))
    return name + ": " + typed_field_name(typed_field) + " cannot hold data_type " + std::to_string(out->dtype) +
           " (expected " + typed_field_name(typed_field_for(out->dtype)) + " or raw_data)";
  if (have_raw) {
    if (raw.size() != static_cast<uint64_t>(*bytes))
      return name + ": raw_data has " + std::to_string(raw.size()) + " bytes, expected " + std::to_string(*bytes);
    out->bytes = std::move(raw);
    return "";
  }
  // The byte size comes from the dims alone: allocate only once the data is known to match
  // it (a few bytes of dims can ask for terabytes).
  if (typed_field == kFloatData || typed_field == kDoubleData) {
    if (fixed.size() != static_cast<uint64_t>(*bytes))
      return name + ": " + typed_field_name(typed_field) + " has " + std::to_string(fixed.size() / (typed_field == kFloatData ? 4 : 8)) +
             " values but the dims need " + std::to_string(*bytes / (typed_field == kFloatData ? 4 : 8));
    out->bytes = std::move(fixed);
    return "";
  }
  if (!typed_field && *numel > 0)
    return name + ": no data (neither raw_data nor typed data) for " + std::to_string(*numel) + " elements";
  if (ints.size() != static_cast<uint64_t>(*numel))
    return name + ": " + typed_field_name(typed_field) + " has " + std::to_string(ints.size()) +
           " values but the dims need " + std::to_string(*numel);
  out->bytes.resize(static_cast<size_t>(*bytes));
  for (size_t i = 0; i < ints.size(); ++i) std::memcpy(out->bytes.data() + i * type->size, &ints[i], type->size);
  return "";
}

std::string read_tensor_pb(const std::string& path, HostTensor* out) {
  std::string err;
  uint64_t file_size = 0;
  int fd = open_regular(path, &file_size, &err);
  if (fd < 0) return err;
  FdCloser closer{fd};
  // The whole file is one message, read whole: cap it before allocating.
  if (file_size > kMaxTensorProtoBytes)
    return path + ": " + std::to_string(file_size) + " bytes is over the " + std::to_string(kMaxTensorProtoBytes) +
           "-byte limit of a protobuf message; use a .npy file for larger inputs";
  std::vector<uint8_t> data(static_cast<size_t>(file_size));
  err = read_exactly(fd, path, 0, data.data(), data.size());
  if (!err.empty()) return err;
  return parse_tensor_pb(path, data.data(), data.size(), out);
}

}  // namespace cuvil::tools
