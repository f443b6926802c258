// Names from the ISA table, and the binary encoding of a Program (one program of the PROGRAMS section).
// Layout: docs/format.md. All integers little-endian; every list is a u32 count then items.
#include "runtime/program.h"

#include "runtime/byte_reader.h"

namespace cuvil::rt {
namespace {

const char* const kOpcodeNames[] = {
#define CUVIL_INSN(name, operands) #name,
#include "runtime/isa.def"
#undef CUVIL_INSN
};
const char* const kOpcodeOperands[] = {
#define CUVIL_INSN(name, operands) operands,
#include "runtime/isa.def"
#undef CUVIL_INSN
};
const char* const kTileNames[] = {
#define CUVIL_TILE(name, operands) #name,
#include "runtime/isa.def"
#undef CUVIL_TILE
};
const char* const kTileOperands[] = {
#define CUVIL_TILE(name, operands) operands,
#include "runtime/isa.def"
#undef CUVIL_TILE
};
const char* const kUnaryNames[] = {
#define CUVIL_TILE_UNARY(name, onnx) #name,
#include "runtime/isa.def"
#undef CUVIL_TILE_UNARY
};
const char* const kBinaryNames[] = {
#define CUVIL_TILE_BINARY(name, onnx) #name,
#include "runtime/isa.def"
#undef CUVIL_TILE_BINARY
};
static_assert(sizeof(kOpcodeNames) / sizeof(kOpcodeNames[0]) == static_cast<size_t>(Opcode::kCount));
static_assert(sizeof(kTileNames) / sizeof(kTileNames[0]) == static_cast<size_t>(TileOpcode::kCount));

constexpr uint32_t kProgramMagic = 0x47525043;  // "CPRG"

void put_ids(ByteWriter& w, const std::vector<uint32_t>& ids) {
  w.u32(static_cast<uint32_t>(ids.size()));
  for (uint32_t v : ids) w.u32(v);
}
std::vector<uint32_t> get_ids(ByteReader& r) {
  uint32_t n = r.count(4);
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = r.u32();
  return v;
}

}  // namespace

const char* opcode_name(Opcode op) {
  return op < Opcode::kCount ? kOpcodeNames[static_cast<int>(op)] : "<bad>";
}
const char* opcode_operands(Opcode op) {
  return op < Opcode::kCount ? kOpcodeOperands[static_cast<int>(op)] : "";
}
const char* tile_opcode_name(TileOpcode op) {
  return op < TileOpcode::kCount ? kTileNames[static_cast<int>(op)] : "<bad>";
}
const char* tile_opcode_operands(TileOpcode op) {
  return op < TileOpcode::kCount ? kTileOperands[static_cast<int>(op)] : "";
}
const char* unary_fn_name(UnaryFn f) {
  return f < UnaryFn::kCount ? kUnaryNames[static_cast<int>(f)] : "<bad>";
}
const char* binary_fn_name(BinaryFn f) {
  return f < BinaryFn::kCount ? kBinaryNames[static_cast<int>(f)] : "<bad>";
}
bool tile_dtype_supported(DType t) {
  switch (t) {
    case DType::Float: case DType::Float16: case DType::BFloat16: case DType::Double:
    case DType::Int8: case DType::UInt8: case DType::Int32: case DType::Int64: case DType::Bool:
      return true;
    default: return false;
  }
}
const char* tensor_kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::kInput: return "input";
    case TensorKind::kOutput: return "output";
    case TensorKind::kWeight: return "weight";
    case TensorKind::kIntermediate: return "intermediate";
  }
  return "?";
}

std::vector<uint8_t> encode_program(const Program& p) {
  ByteWriter w;
  w.u32(kProgramMagic);
  w.u32(static_cast<uint32_t>(p.symbols.size()));
  for (const Symbol& s : p.symbols) {
    w.str(s.name);
    w.i64(s.lo);
    w.i64(s.hi);
    w.u8(s.data_dependent ? 1 : 0);
  }
  w.u32(static_cast<uint32_t>(p.expr_code.size()));
  for (const ExprOp& op : p.expr_code) {
    w.u8(static_cast<uint8_t>(op.kind));
    w.i64(op.value);
  }
  w.u32(static_cast<uint32_t>(p.exprs.size()));
  for (const ExprRange& e : p.exprs) {
    w.u32(e.begin);
    w.u32(e.count);
  }
  w.u32(static_cast<uint32_t>(p.tensors.size()));
  for (const TensorDesc& t : p.tensors) {
    w.str(t.name);
    w.u8(static_cast<uint8_t>(t.kind));
    w.i32(static_cast<int32_t>(t.dtype));
    put_ids(w, t.dims);
    w.u32(t.io_index);
    w.u64(t.weight_offset);
    w.u64(t.weight_size);
    w.u32(t.arena_offset);
  }
  put_ids(w, p.inputs);
  put_ids(w, p.outputs);
  w.u32(static_cast<uint32_t>(p.nodes.size()));
  for (const NodeRecord& n : p.nodes) {
    w.str(n.op_type);
    w.str(n.domain);
    w.str(n.name);
    w.i32(n.opset);
    put_ids(w, n.inputs);
    put_ids(w, n.outputs);
    w.u32(static_cast<uint32_t>(n.attrs.size()));
    for (const AttrValue& a : n.attrs) {
      w.str(a.name);
      w.u8(static_cast<uint8_t>(a.kind));
      w.u32(static_cast<uint32_t>(a.ints.size()));
      for (int64_t v : a.ints) w.i64(v);
      w.u32(static_cast<uint32_t>(a.floats.size()));
      for (float v : a.floats) w.f32(v);
      w.u32(static_cast<uint32_t>(a.strings.size()));
      for (const auto& s : a.strings) w.str(s);
      w.i32(static_cast<int32_t>(a.tensor_dtype));
      w.u32(static_cast<uint32_t>(a.tensor_bytes.size()));
      w.bytes(a.tensor_bytes.data(), a.tensor_bytes.size());
    }
  }
  w.u32(static_cast<uint32_t>(p.kernels.size()));
  for (const TileKernel& k : p.kernels) {
    w.str(k.name);
    put_ids(w, k.domain);
    w.u32(static_cast<uint32_t>(k.maps.size()));
    for (const AccessMap& m : k.maps) {
      w.u32(m.tensor);
      w.u32(m.offset);
      put_ids(w, m.strides);
    }
    w.u32(k.registers);
    put_ids(w, k.body);
    // Reduction loop fields, appended at the end of the kernel record (docs/format.md).
    w.u32(k.loop_extent);
    w.u32(k.loop_chunk);
    w.u32(k.init_end);
    w.u32(k.loop_end);
    w.u32(static_cast<uint32_t>(k.maps.size()));
    for (const AccessMap& m : k.maps) w.u32(m.loop_stride);
  }
  put_ids(w, p.code);
  w.u32(p.arena_size);
  w.u64(p.weights_size);
  w.u32(static_cast<uint32_t>(p.loops.size()));
  for (const LoopDesc& l : p.loops) {
    w.u8(static_cast<uint8_t>(l.kind));
    w.str(l.name);
    for (uint32_t t : {l.counter, l.max_trips, l.cond_init, l.cond, l.cond_next}) w.u32(t);
    put_ids(w, l.init);
    put_ids(w, l.state);
    put_ids(w, l.next);
    put_ids(w, l.final);
    w.u32(static_cast<uint32_t>(l.scan_inputs.size()));
    for (const LoopScanInput& in : l.scan_inputs) {
      w.u32(in.source);
      w.u32(in.slice);
      w.u32(in.axis);
      w.u8(in.reverse);
    }
    w.u32(static_cast<uint32_t>(l.scan_outputs.size()));
    for (const LoopScanOutput& o : l.scan_outputs) {
      w.u32(o.body);
      w.u32(o.stacked);
      w.u32(o.axis);
      w.u8(o.reverse);
    }
    put_ids(w, l.symbols);
    put_ids(w, l.tensors);
  }
  return std::move(w.data());
}

bool decode_program(const uint8_t* data, size_t size, Program* out, std::string* error) {
  ByteReader r(data, size);
  Program p;
  if (r.u32() != kProgramMagic) {
    *error = "program section: bad magic";
    return false;
  }
  uint32_t n = r.count(21);
  p.symbols.resize(n);
  for (Symbol& s : p.symbols) {
    s.name = r.str();
    s.lo = r.i64();
    s.hi = r.i64();
    s.data_dependent = r.u8() != 0;
  }
  n = r.count(9);
  p.expr_code.resize(n);
  for (ExprOp& op : p.expr_code) {
    op.kind = static_cast<ExprOpKind>(r.u8());
    op.value = r.i64();
  }
  n = r.count(8);
  p.exprs.resize(n);
  for (ExprRange& e : p.exprs) {
    e.begin = r.u32();
    e.count = r.u32();
  }
  n = r.count(37);
  p.tensors.resize(n);
  for (TensorDesc& t : p.tensors) {
    t.name = r.str();
    t.kind = static_cast<TensorKind>(r.u8());
    t.dtype = static_cast<DType>(r.i32());
    t.dims = get_ids(r);
    t.io_index = r.u32();
    t.weight_offset = r.u64();
    t.weight_size = r.u64();
    t.arena_offset = r.u32();
  }
  p.inputs = get_ids(r);
  p.outputs = get_ids(r);
  n = r.count(28);
  p.nodes.resize(n);
  for (NodeRecord& node : p.nodes) {
    node.op_type = r.str();
    node.domain = r.str();
    node.name = r.str();
    node.opset = r.i32();
    node.inputs = get_ids(r);
    node.outputs = get_ids(r);
    uint32_t na = r.count(22);
    node.attrs.resize(na);
    for (AttrValue& a : node.attrs) {
      a.name = r.str();
      a.kind = static_cast<AttrValue::Kind>(r.u8());
      uint32_t c = r.count(8);
      a.ints.resize(c);
      for (auto& v : a.ints) v = r.i64();
      c = r.count(4);
      a.floats.resize(c);
      for (auto& v : a.floats) v = r.f32();
      c = r.count(4);
      a.strings.resize(c);
      for (auto& s : a.strings) s = r.str();
      a.tensor_dtype = static_cast<DType>(r.i32());
      c = r.count(1);
      a.tensor_bytes.resize(c);
      r.bytes(a.tensor_bytes.data(), c);
    }
    if (r.failed()) break;
  }
  n = r.count(40);
  p.kernels.resize(n);
  for (TileKernel& k : p.kernels) {
    k.name = r.str();
    k.domain = get_ids(r);
    uint32_t nm = r.count(12);
    k.maps.resize(nm);
    for (AccessMap& m : k.maps) {
      m.tensor = r.u32();
      m.offset = r.u32();
      m.strides = get_ids(r);
    }
    k.registers = r.u32();
    k.body = get_ids(r);
    k.loop_extent = r.u32();
    k.loop_chunk = r.u32();
    k.init_end = r.u32();
    k.loop_end = r.u32();
    std::vector<uint32_t> loop_strides = get_ids(r);
    if (r.failed()) break;
    if (loop_strides.size() != k.maps.size()) {
      *error = "kernel '" + k.name + "': " + std::to_string(loop_strides.size()) +
               " loop strides for " + std::to_string(k.maps.size()) + " maps";
      return false;
    }
    for (size_t m = 0; m < k.maps.size(); ++m) k.maps[m].loop_stride = loop_strides[m];
  }
  p.code = get_ids(r);
  p.arena_size = r.u32();
  p.weights_size = r.u64();
  n = r.count(57);  // smallest loop record: kind, empty name, 5 ids, 8 empty lists
  p.loops.resize(n);
  for (LoopDesc& l : p.loops) {
    l.kind = static_cast<LoopKind>(r.u8());
    l.name = r.str();
    l.counter = r.u32();
    l.max_trips = r.u32();
    l.cond_init = r.u32();
    l.cond = r.u32();
    l.cond_next = r.u32();
    l.init = get_ids(r);
    l.state = get_ids(r);
    l.next = get_ids(r);
    l.final = get_ids(r);
    uint32_t c = r.count(13);
    l.scan_inputs.resize(c);
    for (LoopScanInput& in : l.scan_inputs) {
      in.source = r.u32();
      in.slice = r.u32();
      in.axis = r.u32();
      in.reverse = r.u8();
    }
    c = r.count(13);
    l.scan_outputs.resize(c);
    for (LoopScanOutput& o : l.scan_outputs) {
      o.body = r.u32();
      o.stacked = r.u32();
      o.axis = r.u32();
      o.reverse = r.u8();
    }
    l.symbols = get_ids(r);
    l.tensors = get_ids(r);
    if (r.failed()) break;
  }
  if (r.failed()) {
    *error = "program section is truncated or a count exceeds its size";
    return false;
  }
  if (r.remaining() != 0) {
    *error = "program section has " + std::to_string(r.remaining()) + " trailing bytes";
    return false;
  }
  *out = std::move(p);
  return true;
}

}  // namespace cuvil::rt
