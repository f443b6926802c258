#include "cli/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "support/checked.h"

namespace cuvil::tools {
namespace {

constexpr size_t kMaxHeader = 1 << 16;

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

std::string read_file(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": cannot open";
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return path + ": read failed";
  return "";
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
  *out = h.substr(i, j - i);
  return true;
}

}  // namespace

std::string parse_npy(const std::string& name, const uint8_t* data, size_t size, HostTensor* out) {
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
  pos += header_len;
  std::string descr, fortran, shape;
  if (!dict_value(h, "descr", &descr) || !dict_value(h, "fortran_order", &fortran) || !dict_value(h, "shape", &shape))
    return name + ": header lacks descr, fortran_order or shape";
  if (descr.size() < 2 || (descr[0] != '\'' && descr[0] != '"')) return name + ": bad descr " + descr;
  descr = descr.substr(1, descr.size() - 2);
  if (fortran.rfind("True", 0) == 0) return name + ": Fortran-order arrays are not supported (use np.ascontiguousarray)";
  if (!descr.empty() && descr[0] == '>') return name + ": big-endian dtype " + descr + " is not supported";
  if (descr.size() == 3 && descr[0] == '=') descr[0] = '<';
  const NpyType* type = nullptr;
  for (const auto& k : kTypes)
    if (descr == k.descr || (descr[0] == '<' && descr.substr(1) == std::string(k.descr).substr(1) && k.descr[0] == '|'))
      type = &k;
  if (!type) return name + ": unsupported dtype '" + descr + "'";
  out->dtype = type->onnx;
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
  if (size - pos != static_cast<uint64_t>(*bytes))
    return name + ": data has " + std::to_string(size - pos) + " bytes but shape " + shape + " of " + descr +
           " needs " + std::to_string(*bytes);
  out->bytes.assign(data + pos, data + size);
  return "";
}

std::string read_npy(const std::string& path, HostTensor* out) {
  std::vector<uint8_t> data;
  std::string err = read_file(path, &data);
  if (!err.empty()) return err;
  return parse_npy(path, data.data(), data.size(), out);
}

std::string write_npy(const std::string& path, const HostTensor& t) {
  const NpyType* type = type_by_onnx(t.dtype);
  if (!type) return path + ": dtype " + std::to_string(t.dtype) + " cannot be written as .npy";
  std::string shape = "(";
  for (size_t i = 0; i < t.dims.size(); ++i) shape += std::to_string(t.dims[i]) + (t.dims.size() == 1 || i + 1 < t.dims.size() ? "," : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + type->descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return path + ": cannot create";
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t hl = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(hl & 0xff));
  out.put(static_cast<char>(hl >> 8));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!out) return path + ": write failed";
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
}  // namespace

std::string parse_tensor_pb(const std::string& name, const uint8_t* data, size_t size, HostTensor* out) {
  Wire w{data, data + size};
  out->dims.clear();
  out->bytes.clear();
  out->dtype = 0;
  std::vector<uint8_t> raw;
  bool have_raw = false;
  std::vector<uint64_t> ints;   // int32/int64/uint64 typed data (varints)
  std::vector<uint8_t> fixed;   // float/double typed data
  int fixed_size = 0;
  while (w.ok && w.p < w.end) {
    uint64_t key = w.varint();
    uint32_t field = static_cast<uint32_t>(key >> 3), type = key & 7;
    auto packed_or_single = [&](bool is_fixed, int width) {
      if (type == 2) {
        uint64_t len = w.varint();
        if (!w.ok || len > static_cast<uint64_t>(w.end - w.p)) { w.ok = false; return; }
        const uint8_t* stop = w.p + len;
        if (is_fixed) {
          if (len % width) { w.ok = false; return; }
          fixed.insert(fixed.end(), w.p, stop);
          w.p = stop;
        } else {
          Wire inner{w.p, stop};
          while (inner.ok && inner.p < inner.end) ints.push_back(inner.varint());
          if (!inner.ok) w.ok = false;
          w.p = stop;
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
      case 1:  // dims
        if (type == 2) {
          uint64_t len = w.varint();
          if (!w.ok || len > static_cast<uint64_t>(w.end - w.p)) { w.ok = false; break; }
          Wire inner{w.p, w.p + len};
          while (inner.ok && inner.p < inner.end) out->dims.push_back(static_cast<int64_t>(inner.varint()));
          if (!inner.ok) w.ok = false;
          w.p += len;
        } else {
          out->dims.push_back(static_cast<int64_t>(w.varint()));
        }
        break;
      case 2: out->dtype = static_cast<int32_t>(w.varint()); break;
      case 4: fixed_size = 4; packed_or_single(true, 4); break;   // float_data
      case 10: fixed_size = 8; packed_or_single(true, 8); break;  // double_data
      case 5: case 7: case 11: packed_or_single(false, 0); break; // int32/int64/uint64_data
      case 9: {  // raw_data
        uint64_t len = w.varint();
        if (!w.ok || len > static_cast<uint64_t>(w.end - w.p)) { w.ok = false; break; }
        raw.assign(w.p, w.p + len);
        have_raw = true;
        w.p += len;
        break;
      }
      default: {  // skip
        if (type == 0) w.varint();
        else if (type == 1) { if (w.end - w.p < 8) w.ok = false; else w.p += 8; }
        else if (type == 5) { if (w.end - w.p < 4) w.ok = false; else w.p += 4; }
        else if (type == 2) {
          uint64_t len = w.varint();
          if (!w.ok || len > static_cast<uint64_t>(w.end - w.p)) w.ok = false;
          else w.p += len;
        } else w.ok = false;
      }
    }
  }
  if (!w.ok) return name + ": not a valid TensorProto (truncated or malformed)";
  const NpyType* type = type_by_onnx(out->dtype);
  if (!type) return name + ": unsupported data_type " + std::to_string(out->dtype);
  for (int64_t d : out->dims)
    if (d < 0) return name + ": negative dim";
  auto numel = checked_numel(out->dims);
  if (!numel) return name + ": shape product overflows";
  auto bytes = checked_mul(*numel, type->size);
  if (!bytes) return name + ": byte size overflows";
  if (have_raw) {
    if (raw.size() != static_cast<uint64_t>(*bytes))
      return name + ": raw_data has " + std::to_string(raw.size()) + " bytes, expected " + std::to_string(*bytes);
    out->bytes = std::move(raw);
    return "";
  }
  out->bytes.resize(static_cast<size_t>(*bytes));
  if (fixed_size) {
    if (fixed.size() != static_cast<uint64_t>(*bytes)) return name + ": typed data count does not match the dims";
    std::memcpy(out->bytes.data(), fixed.data(), fixed.size());
    return "";
  }
  if (ints.size() != static_cast<uint64_t>(*numel)) return name + ": typed data count does not match the dims";
  for (size_t i = 0; i < ints.size(); ++i) std::memcpy(out->bytes.data() + i * type->size, &ints[i], type->size);
  return "";
}

std::string read_tensor_pb(const std::string& path, HostTensor* out) {
  std::vector<uint8_t> data;
  std::string err = read_file(path, &data);
  if (!err.empty()) return err;
  return parse_tensor_pb(path, data.data(), data.size(), out);
}

}  // namespace cuvil::tools
