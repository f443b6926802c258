// The disassembler: one function per table of the Program, instructions decoded through the
// operand-kind strings of the ISA table. Tile instructions print as `r2 = Binary.Add r0, r1`
// (destination first, per tile_destination_operand) and program instructions as
// `JumpIfFalse t3, @12`.
#include "runtime/disasm.h"

#include <charconv>
#include <cstring>
#include <optional>
#include <sstream>

#include "runtime/expr_eval.h"
#include "runtime/verifier.h"

namespace cuvil::rt {
namespace {

// Shortest text that reads back to the same float; independent of the C locale.
std::string float_text(float v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string dtype_text(DType t) {
  return dtype_from_onnx(static_cast<int32_t>(t))
             ? dtype_name(t)
             : "dtype(" + std::to_string(static_cast<int32_t>(t)) + ")";
}

std::string expr_list(const Program& p, const std::vector<uint32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + expr_to_string(p, ids[i]);
  return s + "]";
}

std::string tensor_ref(const Program& p, uint32_t t) {
  if (t == kNone) return "-";
  std::string s = "t" + std::to_string(t);
  return t < p.tensors.size() ? s : s + "<bad>";
}

std::string tensor_list(const Program& p, const std::vector<uint32_t>& ids) {
  std::string s = "(";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + tensor_ref(p, ids[i]);
  return s + ")";
}

std::string operand_text(char kind, uint32_t v) {
  const std::string n = std::to_string(v);
  switch (kind) {
    case 'T': return "t" + n;
    case 'N': return "n" + n;
    case 'K': return "k" + n;
    case 'J': return "@" + n;
    case 'L': return "l" + n;
    case 'R':
    case 'A': return "r" + n;
    case 'D': {
      const auto t = v <= 1000 ? dtype_from_onnx(static_cast<int32_t>(v)) : std::nullopt;
      return t ? dtype_name(*t) : "dtype(" + n + ")";
    }
    case 'M': return "m" + n;
    case 'U': return unary_fn_name(static_cast<UnaryFn>(v < 256 ? v : 255));
    case 'B': return binary_fn_name(static_cast<BinaryFn>(v < 256 ? v : 255));
    case 'F': {
      float f;
      std::memcpy(&f, &v, sizeof f);
      return float_text(f);
    }
    default: return n;
  }
}

// Mnemonic with function operands folded in ("Binary.Add"), then the other operands.
// `dest` is the operand printed as "rX = ..." (-1 for none).
std::string insn_text(const char* name, const char* kinds, const uint32_t* ops, int dest) {
  std::string mnemonic = name, args;
  for (size_t i = 0; kinds[i]; ++i) {
    if (static_cast<int>(i) == dest) continue;
    if (kinds[i] == 'U' || kinds[i] == 'B') {
      mnemonic += "." + operand_text(kinds[i], ops[i]);
      continue;
    }
    args += (args.empty() ? " " : ", ") + operand_text(kinds[i], ops[i]);
  }
  // An accumulator destination is also read: "r3 += ReduceSum r1".
  std::string out =
      dest >= 0 ? operand_text('R', ops[dest]) + (kinds[dest] == 'A' ? " += " : " = ") : "";
  return out + mnemonic + args;
}

void print_attr(std::ostringstream& os, const AttrValue& a) {
  using Kind = AttrValue::Kind;
  os << "      " << a.name << " = ";
  auto ints = [&] {
    os << "[";
    for (size_t i = 0; i < a.ints.size(); ++i) os << (i ? ", " : "") << a.ints[i];
    os << "]";
  };
  switch (a.kind) {
    case Kind::kInt: os << (a.ints.empty() ? 0 : a.ints[0]); break;
    case Kind::kFloat: os << float_text(a.floats.empty() ? 0.f : a.floats[0]); break;
    case Kind::kString: os << quoted(a.strings.empty() ? std::string() : a.strings[0]); break;
    case Kind::kInts: ints(); break;
    case Kind::kFloats:
      os << "[";
      for (size_t i = 0; i < a.floats.size(); ++i) os << (i ? ", " : "") << float_text(a.floats[i]);
      os << "]";
      break;
    case Kind::kStrings:
      os << "[";
      for (size_t i = 0; i < a.strings.size(); ++i) os << (i ? ", " : "") << quoted(a.strings[i]);
      os << "]";
      break;
    case Kind::kTensor:
      os << "tensor " << dtype_text(a.tensor_dtype) << " ";
      ints();
      os << " (" << a.tensor_bytes.size() << " bytes)";
      break;
    default: os << "<attribute kind " << static_cast<int>(a.kind) << ">"; break;
  }
  os << "\n";
}

void print_tensors(std::ostringstream& os, const Program& p) {
  os << "tensors " << p.tensors.size() << "\n";
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorDesc& t = p.tensors[i];
    os << "  t" << i << " " << tensor_kind_name(t.kind);
    if (t.io_index != kNone) os << " " << t.io_index;
    os << " " << quoted(t.name) << " " << dtype_text(t.dtype) << " " << expr_list(p, t.dims);
    if (t.kind == TensorKind::kWeight)
      os << " weights @" << t.weight_offset << " +" << t.weight_size;
    if (t.arena_offset != kNone) os << " arena @" << expr_to_string(p, t.arena_offset);
    os << "\n";
  }
  os << "inputs " << tensor_list(p, p.inputs) << "\n";
  os << "outputs " << tensor_list(p, p.outputs) << "\n";
}

void print_kernel(std::ostringstream& os, const Program& p, size_t ki) {
  const TileKernel& k = p.kernels[ki];
  os << "  k" << ki << " " << quoted(k.name) << " domain " << expr_list(p, k.domain)
     << " registers " << k.registers;
  if (k.loop_extent != kNone)
    os << " loop " << expr_to_string(p, k.loop_extent) << " chunk " << k.loop_chunk;
  os << "\n";
  for (size_t m = 0; m < k.maps.size(); ++m) {
    const AccessMap& map = k.maps[m];
    os << "    m" << m << " = " << tensor_ref(p, map.tensor);
    if (map.tensor < p.tensors.size()) os << " " << quoted(p.tensors[map.tensor].name);
    os << " offset " << expr_to_string(p, map.offset) << " strides " << expr_list(p, map.strides);
    if (map.loop_stride != kNone) os << " loop stride " << expr_to_string(p, map.loop_stride);
    os << "\n";
  }
  for (size_t pc = 0; pc < k.body.size();) {
    if (k.loop_extent != kNone && pc == k.init_end) os << "    loop:\n";
    if (k.loop_extent != kNone && pc == k.loop_end) os << "    finish:\n";
    const uint32_t word = k.body[pc];
    const size_t left = k.body.size() - pc - 1;
    os << "    " << pc << ": ";
    if (word >= static_cast<uint32_t>(TileOpcode::kCount) ||
        std::strlen(tile_opcode_operands(static_cast<TileOpcode>(word))) > left) {
      os << ".word " << word << "  ; not a valid tile instruction\n";
      ++pc;
      continue;
    }
    const TileOpcode op = static_cast<TileOpcode>(word);
    const char* kinds = tile_opcode_operands(op);
    os << insn_text(tile_opcode_name(op), kinds, k.body.data() + pc + 1,
                    tile_destination_operand(op))
       << "\n";
    pc += 1 + std::strlen(kinds);
  }
  if (k.loop_extent != kNone && k.body.size() == k.init_end) os << "    loop:\n";
  if (k.loop_extent != kNone && k.body.size() == k.loop_end) os << "    finish:\n";
}

void print_loop(std::ostringstream& os, const Program& p, size_t li) {
  const LoopDesc& l = p.loops[li];
  os << "  l" << li << " " << (l.kind == LoopKind::kScan ? "scan" : "loop") << " " << quoted(l.name)
     << " counter " << tensor_ref(p, l.counter);
  if (l.kind == LoopKind::kLoop)
    os << " trips " << tensor_ref(p, l.max_trips) << " cond " << tensor_ref(p, l.cond_init)
       << " -> " << tensor_ref(p, l.cond) << " <- " << tensor_ref(p, l.cond_next);
  os << "\n";
  for (size_t i = 0; i < l.state.size(); ++i)
    os << "    carry " << tensor_ref(p, l.init[i]) << " -> " << tensor_ref(p, l.state[i]) << " <- "
       << tensor_ref(p, l.next[i]) << " => " << tensor_ref(p, l.final[i]) << "\n";
  for (const LoopScanInput& in : l.scan_inputs)
    os << "    scan in " << tensor_ref(p, in.source) << " axis " << in.axis
       << (in.reverse ? " reverse" : "") << " -> " << tensor_ref(p, in.slice) << "\n";
  for (const LoopScanOutput& o : l.scan_outputs)
    os << "    scan out " << tensor_ref(p, o.body) << " => " << tensor_ref(p, o.stacked) << " axis "
       << o.axis << (o.reverse ? " reverse" : "") << "\n";
  os << "    per iteration: symbols (";
  for (size_t i = 0; i < l.symbols.size(); ++i)
    os << (i ? ", " : "")
       << (l.symbols[i] < p.symbols.size() ? p.symbols[l.symbols[i]].name : std::string("?"));
  os << ") tensors " << tensor_list(p, l.tensors) << "\n";
}

// A short note after CallOp/RunKernel naming what they run.
std::string code_comment(const Program& p, Opcode op, const uint32_t* ops) {
  if (op == Opcode::CallOp && ops[0] < p.nodes.size())
    return "  ; " + p.nodes[ops[0]].op_type + " " + quoted(p.nodes[ops[0]].name);
  if (op == Opcode::RunKernel && ops[0] < p.kernels.size())
    return "  ; " + quoted(p.kernels[ops[0]].name);
  return "";
}

}  // namespace

std::string disassemble(const Program& p) {
  std::ostringstream os;
  os << "symbols " << p.symbols.size() << "\n";
  for (size_t i = 0; i < p.symbols.size(); ++i) {
    const Symbol& s = p.symbols[i];
    os << "  s" << i << " " << s.name << " [" << s.lo << ", "
       << (s.hi == INT64_MAX ? std::string("inf") : std::to_string(s.hi)) << "]"
       << (s.data_dependent ? " data-dependent" : "") << "\n";
  }
  os << "expressions " << p.exprs.size() << "\n";
  for (size_t i = 0; i < p.exprs.size(); ++i)
    os << "  e" << i << " = " << expr_to_string(p, static_cast<uint32_t>(i)) << "\n";
  print_tensors(os, p);
  os << "arena size "
     << (p.arena_size == kNone ? std::string("none") : expr_to_string(p, p.arena_size)) << "\n";
  os << "weights size " << p.weights_size << "\n";

  os << "nodes " << p.nodes.size() << "\n";
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodeRecord& n = p.nodes[i];
    os << "  n" << i << " " << (n.domain.empty() ? "" : n.domain + ".") << n.op_type << " "
       << quoted(n.name) << " opset " << n.opset << " " << tensor_list(p, n.inputs) << " -> "
       << tensor_list(p, n.outputs) << "\n";
    for (const AttrValue& a : n.attrs) print_attr(os, a);
  }

  os << "kernels " << p.kernels.size() << "\n";
  for (size_t i = 0; i < p.kernels.size(); ++i) print_kernel(os, p, i);

  os << "loops " << p.loops.size() << "\n";
  for (size_t i = 0; i < p.loops.size(); ++i) print_loop(os, p, i);
  os << "code " << p.code.size() << " words\n";
  for (size_t pc = 0; pc < p.code.size();) {
    const uint32_t word = p.code[pc];
    const size_t left = p.code.size() - pc - 1;
    os << "  " << pc << ": ";
    if (word >= static_cast<uint32_t>(Opcode::kCount) ||
        std::strlen(opcode_operands(static_cast<Opcode>(word))) > left) {
      os << ".word " << word << "  ; not a valid instruction\n";
      ++pc;
      continue;
    }
    const Opcode op = static_cast<Opcode>(word);
    const char* kinds = opcode_operands(op);
    const uint32_t* ops = p.code.data() + pc + 1;
    os << insn_text(opcode_name(op), kinds, ops, -1) << code_comment(p, op, ops) << "\n";
    pc += 1 + std::strlen(kinds);
  }
  return os.str();
}

}  // namespace cuvil::rt
