// Load-time verification of a decoded Program. One pass per table, in dependency order
// (symbols, expressions, tensors, input/output lists, node records, kernels, code), so each
// pass may rely on the ones before it. Instructions and tile bodies are decoded through the
// operand-kind strings of runtime/isa.def; the few checks that depend on an opcode's meaning
// (what a jump tests, what Copy or Store writes) are listed in one switch each.
#include "runtime/verifier.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "support/checked.h"

namespace cuvil::rt {
namespace {

// ---- static checks of the ISA table: every operand kind is one the verifier knows ----
constexpr bool kinds_within(const char* s, const char* allowed) {
  for (; *s; ++s) {
    bool found = false;
    for (const char* a = allowed; *a; ++a) found = found || *a == *s;
    if (!found) return false;
  }
  return true;
}
constexpr size_t const_strlen(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}
#define CUVIL_INSN(name, operands)                  \
  static_assert(kinds_within(operands, "TNKJLUBFI"), \
                "CUVIL_INSN " #name ": operand kind the verifier does not know");
#include "runtime/isa.def"
#undef CUVIL_INSN
// The CPU tile interpreter decodes at most 4 operands per tile instruction.
#define CUVIL_TILE(name, operands)                                               \
  static_assert(kinds_within(operands, "RMUBFIAD") && const_strlen(operands) <= 4, \
                "CUVIL_TILE " #name ": unknown operand kind or more than 4 operands");
#include "runtime/isa.def"
#undef CUVIL_TILE

const char* expr_op_name(ExprOpKind k) {
  switch (k) {
    case ExprOpKind::kConst: return "Const";
    case ExprOpKind::kSymbol: return "Symbol";
    case ExprOpKind::kAdd: return "Add";
    case ExprOpKind::kMul: return "Mul";
    case ExprOpKind::kFloorDiv: return "FloorDiv";
    case ExprOpKind::kMod: return "Mod";
    case ExprOpKind::kMin: return "Min";
    case ExprOpKind::kMax: return "Max";
  }
  return "?";
}
constexpr uint8_t kLastExprOp = static_cast<uint8_t>(ExprOpKind::kMax);
constexpr uint8_t kLastTensorKind = static_cast<uint8_t>(TensorKind::kIntermediate);
constexpr uint8_t kLastAttrKind = static_cast<uint8_t>(AttrValue::Kind::kTensor);

// Floor division and modulo as the evaluator computes them (runtime/expr_eval.cpp).
std::optional<int64_t> apply_expr_op(ExprOpKind k, int64_t a, int64_t b) {
  switch (k) {
    case ExprOpKind::kAdd: return checked_add(a, b);
    case ExprOpKind::kMul: return checked_mul(a, b);
    case ExprOpKind::kFloorDiv:
    case ExprOpKind::kMod: {
      if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {
        --q;
        r += b;
      }
      return k == ExprOpKind::kFloorDiv ? q : r;
    }
    case ExprOpKind::kMin: return std::min(a, b);
    case ExprOpKind::kMax: return std::max(a, b);
    default: return std::nullopt;
  }
}

class ProgramVerifier {
 public:
  ProgramVerifier(const Program& p, uint64_t weights_size) : p_(p), weights_size_(weights_size) {}

  Status run() {
    if (p_.weights_size != weights_size_)
      return fail("program refers to a weights section of ", p_.weights_size,
                  " bytes, but the package's has ", weights_size_);
    CUVIL_RETURN_IF_ERROR(check_symbols());
    CUVIL_RETURN_IF_ERROR(check_expressions());
    CUVIL_RETURN_IF_ERROR(check_tensors());
    CUVIL_RETURN_IF_ERROR(check_io_list(p_.inputs, TensorKind::kInput, "input"));
    CUVIL_RETURN_IF_ERROR(check_io_list(p_.outputs, TensorKind::kOutput, "output"));
    CUVIL_RETURN_IF_ERROR(check_nodes());
    CUVIL_RETURN_IF_ERROR(check_kernels());
    CUVIL_RETURN_IF_ERROR(check_loops());
    return check_code();
  }

 private:
  template <typename... Parts>
  static Status fail(const Parts&... parts) {
    return make_status(StatusCode::kInvalidPackage, parts...);
  }
  std::string tensor_label(uint32_t t) const {
    return "tensor " + std::to_string(t) + " ('" + p_.tensors[t].name + "')";
  }
  // "<what> <v> out of range (have <n>)" as the tail of a message.
  static std::string out_of_range(const char* what, uint64_t v, size_t n) {
    return std::string(what) + " " + std::to_string(v) + " out of range (have " +
           std::to_string(n) + ")";
  }
  bool expr_ok(uint32_t id) const { return id < p_.exprs.size(); }
  bool writable(uint32_t t) const {
    TensorKind k = p_.tensors[t].kind;
    return k == TensorKind::kOutput || k == TensorKind::kIntermediate;
  }

  Status check_symbols() {
    for (size_t i = 0; i < p_.symbols.size(); ++i) {
      const Symbol& s = p_.symbols[i];
      if (s.name.empty()) return fail("symbol ", i, ": empty name");
      if (s.lo < 0 || s.lo > s.hi)
        return fail("symbol ", i, " ('", s.name, "'): range [", s.lo, ", ", s.hi,
                    "] is empty or negative");
      for (size_t j = 0; j < i; ++j)
        if (p_.symbols[j].name == s.name)
          return fail("symbol ", i, " ('", s.name, "'): name already used by symbol ", j);
    }
    return Status::ok();
  }

  // Simulates each expression's postfix code; evaluates the ones without symbols.
  Status check_expressions() {
    const_values_.assign(p_.exprs.size(), std::nullopt);
    for (size_t i = 0; i < p_.exprs.size(); ++i) {
      const ExprRange& r = p_.exprs[i];
      if (r.count == 0) return fail("expression ", i, ": empty code");
      if (!range_within(r.begin, r.count, p_.expr_code.size()))
        return fail("expression ", i, ": code [", r.begin, ", +", r.count,
                    ") outside the expression code (", p_.expr_code.size(), " ops)");
      int64_t stack[kMaxExprStackDepth];
      uint32_t depth = 0;
      bool constant = true;
      for (uint32_t k = 0; k < r.count; ++k) {
        const ExprOp& op = p_.expr_code[r.begin + k];
        const uint8_t kind = static_cast<uint8_t>(op.kind);
        if (kind > kLastExprOp)
          return fail("expression ", i, ": op ", k, " has unknown kind ", static_cast<int>(kind));
        if (op.kind == ExprOpKind::kConst || op.kind == ExprOpKind::kSymbol) {
          if (op.kind == ExprOpKind::kSymbol) {
            if (op.value < 0 || static_cast<uint64_t>(op.value) >= p_.symbols.size())
              return fail(
                  "expression ", i, ": op ", k, ": ",
                  out_of_range("symbol", static_cast<uint64_t>(op.value), p_.symbols.size()));
            constant = false;
          }
          if (depth == kMaxExprStackDepth)
            return fail("expression ", i, ": needs a stack deeper than ", kMaxExprStackDepth);
          stack[depth++] = op.value;
          continue;
        }
        if (depth < 2)
          return fail("expression ", i, ": op ", k, " (", expr_op_name(op.kind), ") has ", depth,
                      " operand(s) on the stack, needs 2");
        const int64_t b = stack[--depth], a = stack[depth - 1];
        if (constant) {
          auto v = apply_expr_op(op.kind, a, b);
          if (!v)
            return fail("expression ", i, ": op ", k, " (", expr_op_name(op.kind),
                        ") of constants ", a, " and ", b, " overflows or divides by zero");
          stack[depth - 1] = *v;
        }
      }
      if (depth != 1)
        return fail("expression ", i, ": leaves ", depth, " values on the stack (needs exactly 1)");
      if (constant) const_values_[i] = stack[0];
    }
    return Status::ok();
  }

  Status check_tensors() {
    for (uint32_t i = 0; i < p_.tensors.size(); ++i) {
      const TensorDesc& t = p_.tensors[i];
      const uint8_t kind = static_cast<uint8_t>(t.kind);
      if (kind > kLastTensorKind)
        return fail(tensor_label(i), ": kind ", static_cast<int>(kind), " is not valid");
      const int32_t code = static_cast<int32_t>(t.dtype);
      if (!dtype_from_onnx(code)) return fail(tensor_label(i), ": dtype ", code, " out of range");
      if (t.dtype == DType::String)
        return fail(tensor_label(i), ": string tensors are not supported by this runtime");
      if (t.dims.size() > kMaxTensorRank)
        return fail(tensor_label(i), ": rank ", t.dims.size(), " exceeds the limit ",
                    kMaxTensorRank);
      for (size_t d = 0; d < t.dims.size(); ++d)
        if (!expr_ok(t.dims[d]))
          return fail(tensor_label(i), ": dim ", d, ": ",
                      out_of_range("expression", t.dims[d], p_.exprs.size()));
      if (t.arena_offset != kNone) {
        if (t.kind == TensorKind::kInput || t.kind == TensorKind::kWeight)
          return fail(tensor_label(i), ": a ", tensor_kind_name(t.kind),
                      " cannot have an arena offset");
        if (!expr_ok(t.arena_offset))
          return fail(tensor_label(i), ": arena offset ",
                      out_of_range("expression", t.arena_offset, p_.exprs.size()));
      }
      const bool io = t.kind == TensorKind::kInput || t.kind == TensorKind::kOutput;
      if (io) {
        const auto& list = t.kind == TensorKind::kInput ? p_.inputs : p_.outputs;
        if (t.io_index >= list.size() || list[t.io_index] != i)
          return fail(tensor_label(i), ": ", tensor_kind_name(t.kind), " with io_index ",
                      t.io_index == kNone ? std::string("none") : std::to_string(t.io_index),
                      " is not at that position of the ", tensor_kind_name(t.kind), " list (",
                      list.size(), " entries)");
      } else if (t.io_index != kNone) {
        return fail(tensor_label(i), ": a ", tensor_kind_name(t.kind),
                    " must have no io_index (has ", t.io_index, ")");
      }
      if (t.kind == TensorKind::kWeight) {
        CUVIL_RETURN_IF_ERROR(check_weight(i));
      } else if (t.weight_offset != 0 || t.weight_size != 0) {
        return fail(tensor_label(i), ": a ", tensor_kind_name(t.kind),
                    " must have no weight offset/size");
      }
    }
    if (p_.arena_size != kNone && !expr_ok(p_.arena_size))
      return fail("arena size: ", out_of_range("expression", p_.arena_size, p_.exprs.size()));
    return Status::ok();
  }

  // A weight's bytes must lie in the weights section, match its constant shape exactly and
  // be aligned to its element size (kernels read them in place).
  Status check_weight(uint32_t i) {
    const TensorDesc& t = p_.tensors[i];
    int64_t numel = 1;
    for (size_t d = 0; d < t.dims.size(); ++d) {
      const auto& v = const_values_[t.dims[d]];
      if (!v) return fail(tensor_label(i), ": weight dim ", d, " is not a constant");
      if (*v < 0) return fail(tensor_label(i), ": weight dim ", d, " is negative (", *v, ")");
      auto n = checked_mul(numel, *v);
      if (!n) return fail(tensor_label(i), ": element count overflows");
      numel = *n;
    }
    const int bits = dtype_bits(t.dtype);
    auto total_bits = checked_mul(numel, bits);
    auto padded = total_bits ? checked_add(*total_bits, 7) : std::nullopt;
    if (!padded) return fail(tensor_label(i), ": byte size overflows");
    const uint64_t expected = static_cast<uint64_t>(*padded / 8);
    if (t.weight_size != expected)
      return fail(tensor_label(i), ": weight size ", t.weight_size, " bytes != ", numel,
                  " elements x ", dtype_name(t.dtype), " = ", expected, " bytes");
    if (!range_within(t.weight_offset, t.weight_size, weights_size_))
      return fail(tensor_label(i), ": weight bytes at offset ", t.weight_offset, " + size ",
                  t.weight_size, " extend past the weights section (", weights_size_, " bytes)");
    const uint64_t align = bits >= 8 ? std::min<uint64_t>(static_cast<uint64_t>(bits / 8), 8) : 1;
    if (t.weight_offset % align != 0)
      return fail(tensor_label(i), ": weight offset ", t.weight_offset,
                  " is not a multiple of the element alignment ", align);
    return Status::ok();
  }

  Status check_io_list(const std::vector<uint32_t>& list, TensorKind kind, const char* what) {
    for (size_t k = 0; k < list.size(); ++k) {
      const uint32_t id = list[k];
      if (id >= p_.tensors.size())
        return fail(what, " ", k, ": ", out_of_range("tensor", id, p_.tensors.size()));
      if (p_.tensors[id].kind != kind)
        return fail(what, " ", k, ": ", tensor_label(id), " is a ",
                    tensor_kind_name(p_.tensors[id].kind), ", not an ", what);
      if (p_.tensors[id].io_index != k)
        return fail(what, " ", k, ": ", tensor_label(id), " has io_index ", p_.tensors[id].io_index,
                    " (listed more than once?)");
    }
    return Status::ok();
  }

  Status check_attr(size_t n, const AttrValue& a) {
    using Kind = AttrValue::Kind;
    const std::string where = "node record " + std::to_string(n) + " ('" + p_.nodes[n].op_type +
                              "') attribute '" + a.name + "'";
    const uint8_t kind = static_cast<uint8_t>(a.kind);
    if (kind > kLastAttrKind)
      return fail(where, ": kind ", static_cast<int>(kind), " is not valid");
    // Exactly the fields of the attribute's kind are used.
    const bool one = a.kind == Kind::kInt || a.kind == Kind::kFloat || a.kind == Kind::kString;
    const bool ints = a.kind == Kind::kInt || a.kind == Kind::kInts || a.kind == Kind::kTensor;
    const bool floats = a.kind == Kind::kFloat || a.kind == Kind::kFloats;
    const bool strings = a.kind == Kind::kString || a.kind == Kind::kStrings;
    const size_t used = a.kind == Kind::kInt || a.kind == Kind::kInts ? a.ints.size()
                        : floats                                      ? a.floats.size()
                        : strings                                     ? a.strings.size()
                                                                      : 1;
    if (one && used != 1) return fail(where, ": a single value is expected, got ", used);
    if ((!ints && !a.ints.empty()) || (!floats && !a.floats.empty()) ||
        (!strings && !a.strings.empty()))
      return fail(where, ": has values of another kind");
    if (a.kind != Kind::kTensor) {
      if (a.tensor_dtype != DType::Undefined || !a.tensor_bytes.empty())
        return fail(where, ": tensor data on a non-tensor attribute");
      return Status::ok();
    }
    const int32_t code = static_cast<int32_t>(a.tensor_dtype);
    if (!dtype_from_onnx(code) || a.tensor_dtype == DType::String)
      return fail(where, ": tensor dtype ", code, " out of range");
    auto numel = checked_numel(a.ints);
    auto bits = numel ? checked_mul(*numel, dtype_bits(a.tensor_dtype)) : std::nullopt;
    auto padded = bits ? checked_add(*bits, 7) : std::nullopt;
    if (!padded) return fail(where, ": tensor dims are negative or their product overflows");
    if (a.tensor_bytes.size() != static_cast<uint64_t>(*padded / 8))
      return fail(where, ": tensor has ", a.tensor_bytes.size(), " bytes, expected ", *numel, " x ",
                  dtype_name(a.tensor_dtype), " = ", *padded / 8);
    return Status::ok();
  }

  Status check_nodes() {
    for (size_t n = 0; n < p_.nodes.size(); ++n) {
      const NodeRecord& node = p_.nodes[n];
      const std::string where = "node record " + std::to_string(n) + " ('" + node.op_type + "')";
      if (node.op_type.empty()) return fail("node record ", n, ": empty op_type");
      if (node.opset < 0) return fail(where, ": negative opset ", node.opset);
      for (size_t k = 0; k < node.inputs.size(); ++k)
        if (node.inputs[k] != kNone && node.inputs[k] >= p_.tensors.size())
          return fail(where, ": input ", k, ": ",
                      out_of_range("tensor", node.inputs[k], p_.tensors.size()));
      for (size_t k = 0; k < node.outputs.size(); ++k) {
        const uint32_t t = node.outputs[k];
        if (t == kNone) continue;
        if (t >= p_.tensors.size())
          return fail(where, ": output ", k, ": ", out_of_range("tensor", t, p_.tensors.size()));
        if (!writable(t))
          return fail(where, ": output ", k, " writes ", tensor_label(t), ", which is a read-only ",
                      tensor_kind_name(p_.tensors[t].kind));
      }
      for (size_t k = 0; k < node.attrs.size(); ++k) {
        const AttrValue& a = node.attrs[k];
        if (a.name.empty()) return fail(where, ": attribute ", k, " has no name");
        for (size_t j = 0; j < k; ++j)
          if (node.attrs[j].name == a.name)
            return fail(where, ": attribute '", a.name, "' given twice");
        CUVIL_RETURN_IF_ERROR(check_attr(n, a));
      }
    }
    return Status::ok();
  }

  // Operands that mean the same in code and bodies; R and M only exist inside a kernel.
  Status check_operand(char kind, uint32_t v, const std::string& where, const TileKernel* k) {
    switch (kind) {
      case 'T':
        if (v >= p_.tensors.size())
          return fail(where, ": ", out_of_range("tensor", v, p_.tensors.size()));
        return Status::ok();
      case 'N':
        if (v >= p_.nodes.size())
          return fail(where, ": ", out_of_range("node record", v, p_.nodes.size()));
        return Status::ok();
      case 'K':
        if (v >= p_.kernels.size())
          return fail(where, ": ", out_of_range("kernel", v, p_.kernels.size()));
        return Status::ok();
      case 'L':
        if (v >= p_.loops.size())
          return fail(where, ": ", out_of_range("loop record", v, p_.loops.size()));
        return Status::ok();
      case 'R':
        if (v >= k->registers) return fail(where, ": ", out_of_range("register", v, k->registers));
        return Status::ok();
      case 'M':
        if (v >= k->maps.size())
          return fail(where, ": ", out_of_range("access map", v, k->maps.size()));
        return Status::ok();
      case 'U':
        if (v >= static_cast<uint32_t>(UnaryFn::kCount))
          return fail(where, ": ",
                      out_of_range("unary function", v, static_cast<size_t>(UnaryFn::kCount)));
        return Status::ok();
      case 'B':
        if (v >= static_cast<uint32_t>(BinaryFn::kCount))
          return fail(where, ": ",
                      out_of_range("binary function", v, static_cast<size_t>(BinaryFn::kCount)));
        return Status::ok();
      case 'A':
        if (v >= k->registers)
          return fail(where, ": ", out_of_range("accumulator register", v, k->registers));
        return Status::ok();
      case 'D': {
        const auto t = v <= 1000 ? dtype_from_onnx(static_cast<int32_t>(v)) : std::nullopt;
        if (!t || !tile_dtype_supported(*t))
          return fail(where, ": dtype ", v, " is not one a tile conversion supports");
        return Status::ok();
      }
      case 'F':
      case 'I': return Status::ok();
      default:  // J is checked by check_code; the table's kinds are checked statically above
        return fail(where, ": operand kind '", kind, "' is not valid here");
    }
  }

  Status check_kernels() {
    for (size_t ki = 0; ki < p_.kernels.size(); ++ki) {
      const TileKernel& k = p_.kernels[ki];
      const std::string kname = "kernel " + std::to_string(ki) + " ('" + k.name + "')";
      if (k.domain.size() > kMaxTensorRank)
        return fail(kname, ": domain rank ", k.domain.size(), " exceeds the limit ",
                    kMaxTensorRank);
      for (size_t d = 0; d < k.domain.size(); ++d)
        if (!expr_ok(k.domain[d]))
          return fail(kname, ": domain dim ", d, ": ",
                      out_of_range("expression", k.domain[d], p_.exprs.size()));
      const bool has_loop = k.loop_extent != kNone;
      if (has_loop && !expr_ok(k.loop_extent))
        return fail(kname, ": loop extent ",
                    out_of_range("expression", k.loop_extent, p_.exprs.size()));
      if (has_loop && (k.loop_chunk == 0 || k.loop_chunk > kMaxLoopChunk))
        return fail(kname, ": loop chunk ", k.loop_chunk, " is not in [1, ", kMaxLoopChunk, "]");
      if (!has_loop && (k.loop_chunk != 0 || k.init_end != 0 || k.loop_end != 0))
        return fail(kname, ": has no loop, but a loop chunk or sections (", k.loop_chunk, ", ",
                    k.init_end, ", ", k.loop_end, ")");
      for (size_t m = 0; m < k.maps.size(); ++m) {
        const AccessMap& map = k.maps[m];
        const std::string where = kname + " map " + std::to_string(m);
        if (map.tensor >= p_.tensors.size())
          return fail(where, ": ", out_of_range("tensor", map.tensor, p_.tensors.size()));
        if (!tile_dtype_supported(p_.tensors[map.tensor].dtype))
          return fail(where, ": ", tensor_label(map.tensor), " has dtype ",
                      dtype_name(p_.tensors[map.tensor].dtype), ", which tiles cannot convert");
        if (map.loop_stride != kNone && !has_loop)
          return fail(where, ": has a loop stride, but the kernel has no loop");
        if (map.loop_stride != kNone && !expr_ok(map.loop_stride))
          return fail(where, ": loop stride ",
                      out_of_range("expression", map.loop_stride, p_.exprs.size()));
        if (!expr_ok(map.offset))
          return fail(where, ": offset ", out_of_range("expression", map.offset, p_.exprs.size()));
        if (map.strides.size() != k.domain.size())
          return fail(where, ": has ", map.strides.size(), " strides, the domain has rank ",
                      k.domain.size());
        for (size_t d = 0; d < map.strides.size(); ++d)
          if (!expr_ok(map.strides[d]))
            return fail(where, ": stride ", d, ": ",
                        out_of_range("expression", map.strides[d], p_.exprs.size()));
      }
      if (k.registers > kMaxTileRegisters)
        return fail(kname, ": uses ", k.registers, " registers, the limit is ", kMaxTileRegisters);
      CUVIL_RETURN_IF_ERROR(check_body(ki, kname));
    }
    return Status::ok();
  }

  // A body is straight-line sections: decode it word by word; a register must be written
  // before it is read (otherwise it would hold the previous tile's data). With a loop, a
  // register has a shape class from its last write: "chunk" ([tile elements x chunk]) when
  // written by a loop-section instruction other than an accumulation, "tile" otherwise.
  // Loop-section instructions read chunk registers (accumulators are tile registers), and
  // init/finish instructions read tile registers, and a loop accumulator is not overwritten
  // in the loop (it would be read as one on the next chunk); stores and loop-only
  // instructions stay in their sections. The section bounds must be instruction starts.
  Status check_body(size_t ki, const std::string& kname) {
    const TileKernel& k = p_.kernels[ki];
    uint32_t written = 0;  // bit per register; registers <= 16
    uint32_t chunk = 0;    // bit per register whose last write made it chunk-shaped
    uint32_t loop_acc = 0;  // registers the loop section accumulates into
    if (k.init_end > k.loop_end || k.loop_end > k.body.size())
      return fail(kname, ": sections [0, ", k.init_end, ", ", k.loop_end, ", ", k.body.size(),
                  ") are not in order");
    for (size_t pc = 0; pc < k.body.size();) {
      const uint32_t word = k.body[pc];
      if (word >= static_cast<uint32_t>(TileOpcode::kCount))
        return fail(kname, " body word ", pc, ": unknown tile opcode ", word, " (the ISA has ",
                    static_cast<int>(TileOpcode::kCount), ")");
      const TileOpcode op = static_cast<TileOpcode>(word);
      const char* kinds = tile_opcode_operands(op);
      const size_t n = std::strlen(kinds);
      const std::string where =
          kname + " body word " + std::to_string(pc) + " (" + tile_opcode_name(op) + ")";
      if (k.body.size() - pc - 1 < n)
        return fail(where, ": needs ", n, " operand words, only ", k.body.size() - pc - 1,
                    " remain");
      for (uint32_t bound : {k.init_end, k.loop_end})
        if (bound > pc && bound <= pc + n)
          return fail(kname, ": section bound ", bound, " is not an instruction start (inside ",
                      where, ")");
      const int dest = tile_destination_operand(op);
      const bool in_loop = pc >= k.init_end && pc < k.loop_end;
      if (tile_opcode_in_loop_only(op) && !in_loop)
        return fail(where, ": only allowed in the loop section [", k.init_end, ", ", k.loop_end,
                    ")");
      if (op == TileOpcode::LoopExtent && k.loop_extent == kNone)
        return fail(where, ": the kernel has no loop");
      if (op == TileOpcode::Store && in_loop)
        return fail(where, ": a store inside the loop section would run once per chunk");
      if (op == TileOpcode::Iota && in_loop)
        return fail(where, ": Iota numbers the domain's elements, which the loop section does not walk");
      for (size_t i = 0; i < n; ++i) {
        const uint32_t v = k.body[pc + 1 + i];
        CUVIL_RETURN_IF_ERROR(check_operand(kinds[i], v, where, &k));
        const bool reads = kinds[i] == 'A' || (kinds[i] == 'R' && static_cast<int>(i) != dest);
        if (!reads) continue;
        if (!(written & (1u << v)))
          return fail(where, ": reads register ", v, " before any instruction writes it");
        // Accumulators are tile-shaped; everything else a loop instruction reads is a chunk.
        const bool want_chunk = in_loop && kinds[i] != 'A';
        if (((chunk >> v) & 1u) != (want_chunk ? 1u : 0u))
          return fail(where, ": reads register ", v, " as a ", want_chunk ? "chunk" : "tile",
                      " register, but its last write made it a ",
                      want_chunk ? "tile" : "chunk", " register");
      }
      for (size_t i = 0; i < n && !in_loop; ++i)  // so an empty loop touches no such map
        if (kinds[i] == 'M' && k.maps[k.body[pc + 1 + i]].loop_stride != kNone)
          return fail(where, ": map ", k.body[pc + 1 + i],
                      " moves with the loop; only the loop section may use it");
      if (op == TileOpcode::Mma) {  // reads float32 matrices straight from its maps
        for (size_t i = 0; i < n; ++i)
          if (kinds[i] == 'M' && p_.tensors[k.maps[k.body[pc + 1 + i]].tensor].dtype != DType::Float)
            return fail(where, ": map ", k.body[pc + 1 + i], " is not float32");
      }
      if (dest >= 0) {
        const uint32_t r = k.body[pc + 1 + static_cast<size_t>(dest)];
        // The loop section runs again: a chunk written over an accumulator would be
        // accumulated into on the next chunk.
        if (in_loop && kinds[dest] == 'A') loop_acc |= 1u << r;
        else if (in_loop && (loop_acc & (1u << r)))
          return fail(where, ": overwrites register ", r,
                      ", which the loop section accumulates into");
        written |= 1u << r;
        if (in_loop && kinds[dest] != 'A') chunk |= 1u << r;
        else if (kinds[dest] != 'A') chunk &= ~(1u << r);
      }
      if (op == TileOpcode::Store) {  // writes through its map operand
        const uint32_t t = k.maps[k.body[pc + 1 + std::strcspn(kinds, "M")]].tensor;
        if (!writable(t))
          return fail(where, ": stores to ", tensor_label(t), ", which is a read-only ",
                      tensor_kind_name(p_.tensors[t].kind));
      }
      pc += 1 + n;
    }
    return Status::ok();
  }

  // ---- loop records ----
  // A tensor id of a loop record: in range, or kNone where `optional`; written ones writable.
  Status loop_tensor(const std::string& where, const char* what, uint32_t t, bool optional,
                     bool written) {
    if (t == kNone) {
      if (optional) return Status::ok();
      return fail(where, ": ", what, " is missing");
    }
    if (t >= p_.tensors.size())
      return fail(where, ": ", what, ": ", out_of_range("tensor", t, p_.tensors.size()));
    if (written && !writable(t))
      return fail(where, ": ", what, " ", tensor_label(t), " is a read-only ",
                  tensor_kind_name(p_.tensors[t].kind));
    return Status::ok();
  }
  Status loop_scalar(const std::string& where, const char* what, uint32_t t, bool integer_ok,
                     bool bool_ok) {
    if (t == kNone) return Status::ok();
    const DType dt = p_.tensors[t].dtype;
    const bool ok = (bool_ok && dt == DType::Bool) || (integer_ok && dtype_is_integer(dt));
    if (!ok) return fail(where, ": ", what, " ", tensor_label(t), " has dtype ", dtype_name(dt));
    if (!is_scalar(t)) return fail(where, ": ", what, " ", tensor_label(t), " is not a scalar");
    return Status::ok();
  }
  Status same_type(const std::string& where, uint32_t a, uint32_t b, size_t rank_delta) {
    const TensorDesc& x = p_.tensors[a];
    const TensorDesc& y = p_.tensors[b];
    if (x.dtype != y.dtype || x.dims.size() != y.dims.size() + rank_delta)
      return fail(where, ": ", tensor_label(a), " and ", tensor_label(b),
                  " differ in dtype or rank");
    return Status::ok();
  }

  Status check_loops() {
    for (size_t li = 0; li < p_.loops.size(); ++li) {
      const LoopDesc& l = p_.loops[li];
      const std::string where = "loop " + std::to_string(li) + " ('" + l.name + "')";
      const bool scan = l.kind == LoopKind::kScan;
      if (static_cast<uint8_t>(l.kind) > static_cast<uint8_t>(LoopKind::kScan))
        return fail(where, ": kind ", static_cast<int>(l.kind), " is not valid");
      CUVIL_RETURN_IF_ERROR(loop_tensor(where, "counter", l.counter, false, true));
      CUVIL_RETURN_IF_ERROR(loop_scalar(where, "counter", l.counter, true, false));
      if (p_.tensors[l.counter].dtype != DType::Int64)
        return fail(where, ": counter ", tensor_label(l.counter), " is not int64");
      CUVIL_RETURN_IF_ERROR(loop_tensor(where, "trip count", l.max_trips, true, false));
      CUVIL_RETURN_IF_ERROR(loop_scalar(where, "trip count", l.max_trips, true, false));
      CUVIL_RETURN_IF_ERROR(loop_tensor(where, "initial condition", l.cond_init, true, false));
      CUVIL_RETURN_IF_ERROR(loop_scalar(where, "initial condition", l.cond_init, false, true));
      CUVIL_RETURN_IF_ERROR(loop_tensor(where, "condition", l.cond, scan, true));
      CUVIL_RETURN_IF_ERROR(loop_scalar(where, "condition", l.cond, false, true));
      CUVIL_RETURN_IF_ERROR(loop_tensor(where, "next condition", l.cond_next, scan, false));
      CUVIL_RETURN_IF_ERROR(loop_scalar(where, "next condition", l.cond_next, false, true));
      if (scan && (l.max_trips != kNone || l.cond_init != kNone || l.cond != kNone ||
                   l.cond_next != kNone))
        return fail(where, ": a Scan has no trip count or condition");
      const size_t n = l.state.size();
      if (l.init.size() != n || l.next.size() != n || l.final.size() != n)
        return fail(where, ": ", l.init.size(), " initial, ", n, " state, ", l.next.size(),
                    " next and ", l.final.size(), " final values (must be equal)");
      for (size_t i = 0; i < n; ++i) {
        const std::string w = where + " value " + std::to_string(i);
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "initial", l.init[i], false, false));
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "state", l.state[i], false, true));
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "next", l.next[i], false, false));
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "final", l.final[i], true, true));
        CUVIL_RETURN_IF_ERROR(same_type(w, l.state[i], l.init[i], 0));
        CUVIL_RETURN_IF_ERROR(same_type(w, l.state[i], l.next[i], 0));
        if (l.final[i] != kNone) CUVIL_RETURN_IF_ERROR(same_type(w, l.final[i], l.state[i], 0));
      }
      if (!scan && !l.scan_inputs.empty()) return fail(where, ": a Loop has no scan inputs");
      for (size_t i = 0; i < l.scan_inputs.size(); ++i) {
        const LoopScanInput& in = l.scan_inputs[i];
        const std::string w = where + " scan input " + std::to_string(i);
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "source", in.source, false, false));
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "slice", in.slice, false, true));
        CUVIL_RETURN_IF_ERROR(same_type(w, in.source, in.slice, 1));
        if (in.axis >= p_.tensors[in.source].dims.size() || in.reverse > 1)
          return fail(w, ": axis ", in.axis, " or direction ", static_cast<int>(in.reverse),
                      " is not valid");
        if (dtype_bits(p_.tensors[in.source].dtype) % 8 != 0)
          return fail(w, ": sub-byte dtype ", dtype_name(p_.tensors[in.source].dtype));
      }
      for (size_t i = 0; i < l.scan_outputs.size(); ++i) {
        const LoopScanOutput& o = l.scan_outputs[i];
        const std::string w = where + " scan output " + std::to_string(i);
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "body value", o.body, false, false));
        CUVIL_RETURN_IF_ERROR(loop_tensor(w, "stacked", o.stacked, true, true));
        if (o.stacked != kNone) CUVIL_RETURN_IF_ERROR(same_type(w, o.stacked, o.body, 1));
        if (o.axis > p_.tensors[o.body].dims.size() || o.reverse > 1 || (!scan && (o.axis || o.reverse)))
          return fail(w, ": axis ", o.axis, " or direction ", static_cast<int>(o.reverse),
                      " is not valid");
        if (dtype_bits(p_.tensors[o.body].dtype) % 8 != 0)
          return fail(w, ": sub-byte dtype ", dtype_name(p_.tensors[o.body].dtype));
      }
      for (uint32_t s : l.symbols)
        if (s >= p_.symbols.size())
          return fail(where, ": ", out_of_range("symbol", s, p_.symbols.size()));
      for (uint32_t t : l.tensors)
        CUVIL_RETURN_IF_ERROR(loop_tensor(where, "per-iteration tensor", t, false, true));
    }
    return Status::ok();
  }

  // Scalar: rank 0, or every dim the constant 1.
  bool is_scalar(uint32_t t) const {
    for (uint32_t d : p_.tensors[t].dims)
      if (!const_values_[d] || *const_values_[d] != 1) return false;
    return true;
  }

  // Checks that depend on an instruction's meaning, not just its operand kinds.
  Status check_semantics(Opcode op, const uint32_t* operands, const std::string& where) {
    switch (op) {
      case Opcode::JumpIfFalse: {
        const uint32_t t = operands[0];
        const DType dt = p_.tensors[t].dtype;
        if (dt != DType::Bool && !dtype_is_integer(dt))
          return fail(where, ": condition ", tensor_label(t), " has dtype ", dtype_name(dt),
                      ", needs bool or an integer type");
        if (!is_scalar(t)) return fail(where, ": condition ", tensor_label(t), " is not a scalar");
        return Status::ok();
      }
      case Opcode::Copy: {
        const uint32_t dst = operands[0], src = operands[1];
        if (!writable(dst))
          return fail(where, ": destination ", tensor_label(dst), " is a read-only ",
                      tensor_kind_name(p_.tensors[dst].kind));
        const TensorDesc& a = p_.tensors[dst];
        const TensorDesc& b = p_.tensors[src];
        if (a.dtype != b.dtype || a.dims.size() != b.dims.size())
          return fail(where, ": ", tensor_label(src), " and ", tensor_label(dst),
                      " differ in dtype or rank");
        return Status::ok();
      }
      default: return Status::ok();
    }
  }

  Status check_code() {
    const std::vector<uint32_t>& code = p_.code;
    // Pass 1: instruction boundaries. Jump targets are word positions and must be starts.
    std::vector<uint32_t> starts;
    for (size_t pc = 0; pc < code.size();) {
      const uint32_t word = code[pc];
      if (word >= static_cast<uint32_t>(Opcode::kCount))
        return fail("instruction ", pc, ": unknown opcode ", word, " (the ISA has ",
                    static_cast<int>(Opcode::kCount), ")");
      const Opcode op = static_cast<Opcode>(word);
      const size_t n = std::strlen(opcode_operands(op));
      if (code.size() - pc - 1 < n)
        return fail("instruction ", pc, " (", opcode_name(op), "): needs ", n,
                    " operand words, only ", code.size() - pc - 1, " remain");
      starts.push_back(static_cast<uint32_t>(pc));
      pc += 1 + n;
    }
    if (starts.empty()) return fail("program code is empty (it must end with End)");
    if (static_cast<Opcode>(code[starts.back()]) != Opcode::End)
      return fail("program code does not end with End (last instruction ", starts.back(), " is ",
                  opcode_name(static_cast<Opcode>(code[starts.back()])), ")");
    // Pass 2: operands.
    for (uint32_t pc : starts) {
      const Opcode op = static_cast<Opcode>(code[pc]);
      const char* kinds = opcode_operands(op);
      const std::string where = "instruction " + std::to_string(pc) + " (" + opcode_name(op) + ")";
      for (size_t i = 0; kinds[i]; ++i) {
        const uint32_t v = code[pc + 1 + i];
        if (kinds[i] != 'J') {
          CUVIL_RETURN_IF_ERROR(check_operand(kinds[i], v, where, nullptr));
          continue;
        }
        if (v >= code.size())
          return fail(where, ": jump target ", v, " is outside the program (", code.size(),
                      " words)");
        auto it = std::upper_bound(starts.begin(), starts.end(), v);  // first start > v
        const uint32_t owner = *(it - 1);                             // starts[0] == 0 <= v
        if (owner != v)
          return fail(where, ": jump target ", v, " is inside instruction ", owner, " (",
                      opcode_name(static_cast<Opcode>(code[owner])),
                      "), not at an instruction start");
      }
      CUVIL_RETURN_IF_ERROR(check_semantics(op, code.data() + pc + 1, where));
    }
    return Status::ok();
  }

  const Program& p_;
  const uint64_t weights_size_;
  std::vector<std::optional<int64_t>> const_values_;  // per expression, when symbol-free
};

}  // namespace

int tile_destination_operand(TileOpcode op) {
  const char* kinds = tile_opcode_operands(op);
  int i = 0;
  while (kinds[i] == 'U' || kinds[i] == 'B') ++i;
  return kinds[i] == 'R' || kinds[i] == 'A' ? i : -1;
}

bool tile_opcode_in_loop_only(TileOpcode op) {
  return op == TileOpcode::ReduceSum || op == TileOpcode::ReduceMax ||
         op == TileOpcode::ReduceMin || op == TileOpcode::Mma;
}

Status verify_program(const Program& p, uint64_t weights_size) {
  return ProgramVerifier(p, weights_size).run();
}

}  // namespace cuvil::rt
