// The in-place decision for state tensors (runtime/state_layout.h).
#include "runtime/state_layout.h"

#include <cstring>

namespace cuvil::rt {
namespace {

// Ops whose kernels read only their inputs' dims, never the data (runtime/cpu/ops/tensor.cpp):
// the past's view has the committed dims in place too, so these may read it (exporters compute
// the past length with Shape -> Gather, which shape-arithmetic turns into SymbolicInts).
bool reads_only_dims(const NodeRecord& n) {
  const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
  return (onnx && (n.op_type == "Shape" || n.op_type == "Size")) ||
         (n.domain == "cuvil" && n.op_type == "SymbolicInts");
}

// Why state `r` cannot be kept in place in program `p`, or "" when it can.
std::string why_not_in_place(const Program& p, const StateRecord& r) {
  const uint32_t past = p.inputs[r.input], present = p.outputs[r.output];
  const std::string& past_name = p.tensors[past].name;
  const std::string& present_name = p.tensors[present].name;
  if (r.dtype != DType::Float || r.max_dims.size() != 4 || r.axis != 2)
    return "'" + past_name + "' is not f32 [batch, heads, length, head_dim] (what the fused attention appends to)";
  if (!p.loops.empty()) return "the program has loops";
  // The one writer of the present: a cuvil::Attention whose matching past is the state input.
  const NodeRecord* writer = nullptr;
  uint32_t writer_index = kNone;
  int writers = 0;
  for (uint32_t i = 0; i < p.nodes.size(); ++i)
    for (size_t j = 0; j < p.nodes[i].outputs.size(); ++j)
      if (p.nodes[i].outputs[j] == present) {
        ++writers;
        const NodeRecord& n = p.nodes[i];
        if (n.op_type == "Attention" && n.domain == "cuvil" && (j == 1 || j == 2) && n.inputs.size() > 3 + j &&
            n.inputs[3 + j] == past) {
          writer = &n;
          writer_index = i;
        }
      }
  if (!writer || writers != 1)
    return "'" + present_name + "' is not made by a fused Attention from '" + past_name +
           "' (a Concat the attention fusion did not absorb, or another op)";
  // Nobody else reads the past or reads or writes the present.
  for (const NodeRecord& n : p.nodes) {
    int reads = 0;
    for (uint32_t in : n.inputs) reads += (in == past) + (in == present) * 2;
    if (reads == 1 && &n != writer && reads_only_dims(n)) continue;
    if (&n == writer ? reads != 1 : reads != 0)
      return "node '" + n.name + "' (" + n.op_type + ") also reads '" + (reads >= 2 ? present_name : past_name) + "'";
  }
  for (const TileKernel& k : p.kernels)
    for (const AccessMap& m : k.maps)
      if (m.tensor == past || m.tensor == present)
        return "tile kernel " + k.name + " reads or writes '" + (m.tensor == past ? past_name : present_name) + "'";
  int outputs = 0;
  for (uint32_t o : p.outputs) outputs += o == present || o == past;
  if (outputs != 1) return "'" + present_name + "' or '" + past_name + "' is an output twice";
  int calls = 0;
  for (size_t pc = 0; pc < p.code.size();) {
    const auto op = static_cast<Opcode>(p.code[pc]);
    if (op == Opcode::CallOp && pc + 1 < p.code.size() && p.code[pc + 1] == writer_index) ++calls;
    if (op == Opcode::Copy && pc + 2 < p.code.size())
      for (size_t k : {pc + 1, pc + 2})
        if (p.code[k] == past || p.code[k] == present)
          return "a Copy instruction reads or writes '" + (p.code[k] == past ? past_name : present_name) + "'";
    if (op >= Opcode::kCount) break;  // the verifier refuses such code; nothing to decide here
    pc += 1 + std::strlen(opcode_operands(op));
  }
  if (calls != 1) return "node '" + writer->name + "' runs " + std::to_string(calls) + " times per run";
  return "";
}

}  // namespace

std::vector<StateLayout> plan_state_layouts(const std::vector<const Program*>& programs,
                                            const std::vector<StateRecord>& states) {
  std::vector<StateLayout> out(states.size());
  for (size_t s = 0; s < states.size(); ++s) {
    out[s].in_place = !programs.empty();
    for (size_t i = 0; i < programs.size() && out[s].in_place; ++i) {
      std::string why = why_not_in_place(*programs[i], states[s]);
      if (why.empty()) continue;
      out[s].in_place = false;
      out[s].why_copied = programs.size() > 1 ? "bucket " + std::to_string(i) + ": " + why : why;
    }
  }
  return out;
}

std::string state_layout_text(const StateLayout& layout) {
  return layout.in_place ? "in place" : "copied: " + layout.why_copied;
}

}  // namespace cuvil::rt
