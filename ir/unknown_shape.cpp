// ir/unknown_shape.h: the cause of a gap in a value's shape, read off the node that makes it.
#include "ir/unknown_shape.h"

namespace cuvil {

std::string what_is_unknown(const Value& v) {
  if (!v.shape) return "rank unknown";
  std::string dims;
  int n = 0;
  for (size_t k = 0; k < v.shape->size(); ++k)
    if (!(*v.shape)[k]) dims += (n++ ? ", " : "") + std::to_string(k);
  return (n == 1 ? "dim " : "dims ") + dims + " unknown";
}

namespace {
const Graph* branch_of(const Node& n, const char* key) {
  const Attribute* a = n.attr(key);
  return a && a->kind == Attribute::Kind::Graph ? a->g.get() : nullptr;
}
}  // namespace

std::string why_shape_unknown(const Graph& g, const Value& v) {
  if (v.producer < 0) {
    if (v.outer != kNoValue) return "captured from the enclosing graph, where it is not known";
    return "the model declares it without a full shape (fix dims with --dim)";
  }
  const Node& n = g.nodes[static_cast<size_t>(v.producer)];
  if (n.op == OpKind::Unknown)
    return "no shape rule for " + (n.domain.empty() ? std::string() : n.domain + "::") + n.op_type;
  size_t out_index = 0;
  while (out_index < n.outputs.size() && (n.outputs[out_index] == kNoValue ||
                                         &g.value(n.outputs[out_index]) != &v))
    ++out_index;
  if (n.op == OpKind::If) {
    const Graph* t = branch_of(n, "then_branch");
    const Graph* e = branch_of(n, "else_branch");
    if (t && e && out_index < t->outputs.size() && out_index < e->outputs.size()) {
      const Value& tv = t->value(t->outputs[out_index]);
      const Value& ev = e->value(e->outputs[out_index]);
      if (tv.shape && ev.shape && tv.shape->size() != ev.shape->size())
        return "the branches give different ranks (then_branch " + std::to_string(tv.shape->size()) +
               ", else_branch " + std::to_string(ev.shape->size()) +
               "), chosen by the condition at run time (fix the condition's inputs with --freeze)";
      for (const Value* b : {&tv, &ev})
        if (!b->shape_known())
          return std::string(b == &tv ? "then_branch" : "else_branch") + " gives '" + b->name + "' with " +
                 what_is_unknown(*b);
    }
  }
  if (n.op == OpKind::Loop || n.op == OpKind::Scan)
    return "a loop-carried or scanned value whose shape changes between iterations";
  for (ValueId in : n.inputs)
    if (in != kNoValue && !g.value(in).shape_known())
      return "its input '" + g.value(in).name + "' has " + what_is_unknown(g.value(in));
  std::string runtime_inputs;
  for (ValueId in : n.inputs)
    if (in != kNoValue && !g.value(in).data && !g.value(in).sym_data)
      runtime_inputs += (runtime_inputs.empty() ? "'" : ", '") + g.value(in).name + "'";
  if (!runtime_inputs.empty())
    return "it depends on the contents of " + runtime_inputs + ", known only at run time";
  return "the " + n.op_type + " rule could not derive it";
}

}  // namespace cuvil
