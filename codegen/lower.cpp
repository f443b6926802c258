#include "codegen/lower.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "codegen/memory_plan.h"
#include "codegen/tile_kernels.h"
#include "runtime/op_kernel.h"
#include "support/error.h"

namespace cuvil::codegen {
namespace {

using rt::kNone;

// ONNX op -> tile function, from the ISA table.
std::optional<rt::UnaryFn> tile_unary(const std::string& op) {
#define CUVIL_TILE_UNARY(name, onnx) \
  if (op == #onnx) return rt::UnaryFn::name;
#include "runtime/isa.def"
#undef CUVIL_TILE_UNARY
  return std::nullopt;
}
std::optional<rt::BinaryFn> tile_binary(const std::string& op) {
#define CUVIL_TILE_BINARY(name, onnx) \
  if (op == #onnx) return rt::BinaryFn::name;
#include "runtime/isa.def"
#undef CUVIL_TILE_BINARY
  return std::nullopt;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

class Lowerer {
 public:
  Lowerer(const Model& m, const LowerOptions& o) : model_(m), graph_(*m.graph), opt_(o) {}

  LoweredModel run() {
    check_supported();
    collect_input_symbols();
    make_tensors();
    group_nodes();
    plan_and_emit();
    out_.program.weights_size = out_.weights.size();
    return std::move(out_);
  }

 private:
  // ---- checks ----
  void check_supported() {
    std::map<std::string, std::vector<std::string>> missing;
    for (const Node& n : graph_.nodes) {
      if (op_flags(n.op) & kControlFlow) {
        missing["control flow " + n.op_type].push_back(n.name);
        continue;
      }
      if (!rt::find_op_kernel(n.domain, n.op_type))
        missing[(n.domain.empty() ? "" : n.domain + "::") + n.op_type].push_back(n.name);
    }
    if (missing.empty()) return;
    std::ostringstream os;
    os << "the CPU code generator has no kernel for " << missing.size() << " op(s):";
    for (const auto& [op, nodes] : missing) {
      os << "\n  " << op << " (" << nodes.size() << "): ";
      for (size_t i = 0; i < nodes.size() && i < 5; ++i) os << (i ? ", " : "") << "'" << nodes[i] << "'";
      if (nodes.size() > 5) os << ", ...";
    }
    throw Diagnostic(ExitCode::kUnsupported, os.str());
  }

  // ---- symbols and expressions ----
  void collect_input_symbols() {
    for (ValueId id : graph_.inputs) {
      const Value& v = graph_.value(id);
      if (!v.shape) continue;
      for (const Dim& d : *v.shape)
        if (d)
          for (const auto& s : d->symbols()) input_symbols_.insert(s);
    }
  }

  uint32_t symbol_index(const std::string& name) {
    auto it = symbol_ids_.find(name);
    if (it != symbol_ids_.end()) return it->second;
    rt::Symbol s;
    s.name = name;
    sym::Range r = model_.ranges.get(name);
    s.lo = r.lo;
    s.hi = r.hi;
    s.data_dependent = !input_symbols_.count(name);
    uint32_t id = static_cast<uint32_t>(out_.program.symbols.size());
    out_.program.symbols.push_back(s);
    symbol_ids_.emplace(name, id);
    return id;
  }

  uint32_t expr(const DimExpr& e) {
    std::string key = e.to_string();
    auto it = expr_ids_.find(key);
    if (it != expr_ids_.end()) return it->second;
    rt::ExprRange range;
    range.begin = static_cast<uint32_t>(out_.program.expr_code.size());
    for (const sym::PostfixOp& op : sym::to_postfix(e)) {
      rt::ExprOp r;
      switch (op.kind) {
        case sym::PostfixOp::Kind::kConst: r.kind = rt::ExprOpKind::kConst; r.value = op.value; break;
        case sym::PostfixOp::Kind::kSymbol:
          r.kind = rt::ExprOpKind::kSymbol;
          r.value = symbol_index(op.symbol);
          break;
        case sym::PostfixOp::Kind::kAdd: r.kind = rt::ExprOpKind::kAdd; break;
        case sym::PostfixOp::Kind::kMul: r.kind = rt::ExprOpKind::kMul; break;
        case sym::PostfixOp::Kind::kFloorDiv: r.kind = rt::ExprOpKind::kFloorDiv; break;
        case sym::PostfixOp::Kind::kMod: r.kind = rt::ExprOpKind::kMod; break;
        case sym::PostfixOp::Kind::kMin: r.kind = rt::ExprOpKind::kMin; break;
        case sym::PostfixOp::Kind::kMax: r.kind = rt::ExprOpKind::kMax; break;
      }
      out_.program.expr_code.push_back(r);
    }
    range.count = static_cast<uint32_t>(out_.program.expr_code.size()) - range.begin;
    uint32_t id = static_cast<uint32_t>(out_.program.exprs.size());
    out_.program.exprs.push_back(range);
    expr_ids_.emplace(key, id);
    return id;
  }

  DimExpr fresh_symbol(const std::string& hint) {
    std::string name;
    for (char c : hint) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    while (model_.ranges.has(name) || input_symbols_.count(name) || used_fresh_.count(name)) name += "_";
    used_fresh_.insert(name);
    return DimExpr::symbol(name);
  }

  bool mentions_data_dependent(const Shape& s) const {
    for (const Dim& d : s)
      for (const auto& name : d->symbols())
        if (!input_symbols_.count(name)) return true;
    return false;
  }

  // Shape with unknown dims replaced by fresh data-dependent symbols.
  Shape complete_shape(const Value& v) {
    if (v.kind != ValueKind::Tensor)
      fail(ExitCode::kUnsupported, "value '", v.name, "' is a ", value_kind_name(v.kind),
           "; the code generator handles tensors only");
    if (!v.shape)
      fail(ExitCode::kUnsupported, "value '", v.name, "' has unknown rank; the code generator needs "
           "every rank (check `cuvilc inspect` for values whose shape is unknown)");
    Shape s = *v.shape;
    for (size_t k = 0; k < s.size(); ++k) {
      if (!s[k]) {
        s[k] = fresh_symbol("dyn_" + v.name + "_" + std::to_string(k));
        continue;
      }
      // The runtime binds a data-dependent symbol from the dims a kernel produces, which
      // needs the dim to be exactly that symbol. A compound expression over data-dependent
      // symbols (e.g. floordiv(frame_length, 2) + 1) is renamed to one symbol per distinct
      // expression, so every tensor with that extent still agrees on it.
      if (!s[k]->as_symbol() && mentions_data_dependent(Shape{s[k]})) {
        std::string key = s[k]->to_string();
        auto it = compound_symbols_.find(key);
        if (it == compound_symbols_.end())
          it = compound_symbols_.emplace(key, fresh_symbol("dyn_" + v.name + "_" + std::to_string(k))).first;
        s[k] = it->second;
      }
    }
    return s;
  }

  // ---- tensors ----
  uint32_t add_tensor(const Value& v, rt::TensorKind kind, const Shape& shape) {
    rt::TensorDesc t;
    t.name = v.name;
    t.kind = kind;
    t.dtype = v.dtype;
    for (const Dim& d : shape) t.dims.push_back(expr(*d));
    uint32_t id = static_cast<uint32_t>(out_.program.tensors.size());
    out_.program.tensors.push_back(t);
    shapes_.push_back(shape);
    return id;
  }

  void make_tensors() {
    std::set<ValueId> used;
    for (const Node& n : graph_.nodes)
      for (ValueId in : n.inputs)
        if (in != kNoValue) used.insert(in);
    for (ValueId o : graph_.outputs) used.insert(o);

    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      const Value& v = graph_.value(graph_.inputs[i]);
      uint32_t t = add_tensor(v, rt::TensorKind::kInput, complete_shape(v));
      out_.program.tensors[t].io_index = static_cast<uint32_t>(i);
      out_.program.inputs.push_back(t);
      tensor_of_[graph_.inputs[i]] = t;
    }
    for (ValueId id = 0; id < static_cast<ValueId>(graph_.values.size()); ++id) {
      const Value& v = graph_.value(id);
      if (!v.is_initializer || !used.count(id)) continue;
      Shape s;
      for (int64_t d : v.data->dims) s.emplace_back(DimExpr(d));
      uint32_t t = add_tensor(v, rt::TensorKind::kWeight, s);
      while (out_.weights.size() % 64) out_.weights.push_back(0);
      out_.program.tensors[t].weight_offset = out_.weights.size();
      out_.program.tensors[t].weight_size = v.data->bytes.size();
      out_.weights.insert(out_.weights.end(), v.data->bytes.begin(), v.data->bytes.end());
      tensor_of_[id] = t;
    }
    std::set<ValueId> outputs(graph_.outputs.begin(), graph_.outputs.end());
    for (const Node& n : graph_.nodes)
      for (ValueId o : n.outputs) {
        if (o == kNoValue) continue;
        const Value& v = graph_.value(o);
        bool is_out = outputs.count(o) != 0;
        tensor_of_[o] = add_tensor(v, is_out ? rt::TensorKind::kOutput : rt::TensorKind::kIntermediate,
                                   complete_shape(v));
      }
    // Graph outputs: produced by a node, or copies of inputs/weights.
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      ValueId o = graph_.outputs[i];
      const Value& v = graph_.value(o);
      uint32_t t;
      if (v.producer >= 0) {
        t = tensor_of_.at(o);
      } else {
        t = add_tensor(v, rt::TensorKind::kOutput, complete_shape(v));
        output_copies_.emplace_back(t, tensor_of_.at(o));
      }
      out_.program.tensors[t].io_index = static_cast<uint32_t>(i);
      out_.program.outputs.push_back(t);
    }
  }

  // ---- fusion into tile kernels ----
  struct Group {
    std::vector<size_t> nodes;  // in topological order
    ValueId output = kNoValue;
    Shape domain;
    bool loop = false;  // one node lowered by codegen/tile_kernels (reduction loop)
  };

  tile::KernelContext kernel_context() {
    return {graph_, model_.ranges, [this](const DimExpr& e) { return expr(e); },
            [this](ValueId v) { return tensor_of_.at(v); },
            [this](ValueId v) -> const Shape& { return shapes_[tensor_of_.at(v)]; }};
  }

  // A node that becomes a loop kernel of its own (codegen/tile_kernels.h); its shapes must
  // not wait on data, since a kernel's extents are evaluated before it runs.
  bool loop_kernel(const Node& n) {
    for (ValueId v : n.inputs)
      if (v != kNoValue && mentions_data_dependent(shapes_[tensor_of_.at(v)])) return false;
    for (ValueId v : n.outputs)
      if (v == kNoValue || mentions_data_dependent(shapes_[tensor_of_.at(v)])) return false;
    return tile::is_loop_kernel(n, kernel_context());
  }

  bool is_f32(ValueId id) const { return id != kNoValue && graph_.value(id).dtype == DType::Float; }

  // Can input `in` (shape s) be read through an affine map over `domain`?
  bool broadcastable(const Shape& s, const Shape& domain) const {
    if (s.size() > domain.size()) return false;
    for (size_t k = 0; k < s.size(); ++k) {
      const DimExpr& a = *s[k];
      const DimExpr& d = *domain[k + domain.size() - s.size()];
      if (a.constant() == 1 || sym::prove_equal(a, d, model_.ranges)) continue;
      return false;
    }
    return true;
  }

  bool fusible(const Node& n) const {
    if (tile::fusible_cast(n, graph_)) {
      const Shape& domain = shapes_[tensor_of_.at(n.outputs[0])];
      return !mentions_data_dependent(domain) &&
             broadcastable(shapes_[tensor_of_.at(n.inputs[0])], domain);
    }
    if (n.outputs.size() != 1 || !is_f32(n.outputs[0])) return false;
    const bool unary = tile_unary(n.op_type).has_value();
    const bool binary = tile_binary(n.op_type).has_value() && n.inputs.size() == 2;
    const bool clip = n.op_type == "Clip";
    if (!unary && !binary && !clip) return false;
    if (n.op_type == "Identity" && n.inputs.size() != 1) return false;
    const Shape& domain = shapes_[tensor_of_.at(n.outputs[0])];
    // A kernel's domain is evaluated before it runs, so it must not wait on data.
    if (mentions_data_dependent(domain)) return false;
    if (clip) {
      if (n.opset < 11) return false;  // attribute form: leave to the kernel
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        ValueId b = n.inputs[i];
        if (b == kNoValue) continue;
        const Value& v = graph_.value(b);
        if (!v.data || v.data->dtype != DType::Float || v.data->numel() != 1) return false;
      }
      return is_f32(n.inputs[0]) && broadcastable(shapes_[tensor_of_.at(n.inputs[0])], domain);
    }
    for (ValueId in : n.inputs) {
      if (!is_f32(in)) return false;
      if (!broadcastable(shapes_[tensor_of_.at(in)], domain)) return false;
    }
    return true;
  }

  void group_nodes() {
    std::map<ValueId, int> consumers;
    for (const Node& n : graph_.nodes)
      for (ValueId in : n.inputs)
        if (in != kNoValue) consumers[in]++;
    for (ValueId o : graph_.outputs) consumers[o] += 2;  // never internal
    std::map<ValueId, int> group_of_value;  // group output value -> group index
    group_of_node_.assign(graph_.nodes.size(), -1);
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      const Node& n = graph_.nodes[i];
      if (opt_.fuse_elementwise && loop_kernel(n)) {  // elementwise ops may join as an epilogue
        groups_.push_back(Group{{i}, n.outputs[0], shapes_[tensor_of_.at(n.outputs[0])], true});
        group_of_node_[i] = static_cast<int>(groups_.size()) - 1;
        group_of_value[n.outputs[0]] = group_of_node_[i];
        continue;
      }
      if (!opt_.fuse_elementwise || !fusible(n)) continue;
      const Shape& domain = shapes_[tensor_of_.at(n.outputs[0])];
      int join = -1;
      for (ValueId in : n.inputs) {
        auto it = group_of_value.find(in);
        if (it == group_of_value.end() || consumers[in] != 1) continue;
        Group& g = groups_[it->second];
        if (g.output != in || g.domain.size() != domain.size()) continue;
        bool same = true;
        for (size_t k = 0; k < domain.size(); ++k)
          same = same && sym::prove_equal(*g.domain[k], *domain[k], model_.ranges);
        // Keeps live registers <= 16 (a loop kernel uses up to 3 of its own).
        if (same && g.nodes.size() < (g.loop ? 9u : 12u)) {
          join = it->second;
          break;
        }
      }
      if (join < 0) {
        groups_.push_back(Group{});
        join = static_cast<int>(groups_.size()) - 1;
        groups_[join].domain = domain;
      } else {
        group_of_value.erase(groups_[join].output);
      }
      groups_[join].nodes.push_back(i);
      groups_[join].output = n.outputs[0];
      group_of_value[n.outputs[0]] = join;
      group_of_node_[i] = join;
    }
  }

  // Builds the tile kernel of a group; returns its index.
  uint32_t emit_kernel(const Group& g) {
    rt::TileKernel k;
    std::map<ValueId, uint32_t> reg_of;
    uint32_t next_reg = 0;
    // A loop group starts from its loop kernel (codegen/tile_kernels.h); the elementwise
    // nodes after it extend the finish section, which ends with the store below.
    const std::vector<size_t> chain(g.nodes.begin() + (g.loop ? 1 : 0), g.nodes.end());
    if (g.loop) {
      tile::LoopKernel lk = tile::emit_loop_kernel(graph_.nodes[g.nodes[0]], kernel_context());
      k = std::move(lk.kernel);
      next_reg = k.registers;
      reg_of[graph_.nodes[g.nodes[0]].outputs[0]] = lk.result;
    } else {
      for (const Dim& d : g.domain) k.domain.push_back(expr(*d));
    }
    const Node& last = graph_.nodes[g.nodes.back()];
    k.name = last.name;
    // Registers are reused once the value they hold has no further use in the body.
    std::map<ValueId, int> uses;
    for (size_t ni : chain)
      for (ValueId in : graph_.nodes[ni].inputs)
        if (in != kNoValue) uses[in]++;
    uses[g.output]++;  // the final store
    std::vector<uint32_t> free_regs;
    auto new_reg = [&]() -> uint32_t {
      if (!free_regs.empty()) {
        uint32_t r = free_regs.back();
        free_regs.pop_back();
        return r;
      }
      return next_reg++;
    };
    auto release = [&](ValueId v) {
      if (v == kNoValue) return;
      auto it = reg_of.find(v);
      if (it != reg_of.end() && --uses[v] == 0) {
        free_regs.push_back(it->second);
        reg_of.erase(it);
      }
    };
    auto map_for = [&](uint32_t tensor) -> uint32_t {
      const Shape& s = shapes_[tensor];
      rt::AccessMap m;
      m.tensor = tensor;
      m.offset = expr(DimExpr(0));
      std::vector<DimExpr> strides(g.domain.size(), DimExpr(0));
      DimExpr stride(1);
      for (size_t kk = s.size(); kk-- > 0;) {
        size_t dk = kk + g.domain.size() - s.size();
        bool bcast = s[kk]->constant() == 1 && g.domain[dk]->constant() != 1;
        strides[dk] = bcast ? DimExpr(0) : stride;
        stride = stride * *s[kk];
      }
      for (const DimExpr& st : strides) m.strides.push_back(expr(st));
      k.maps.push_back(m);
      return static_cast<uint32_t>(k.maps.size()) - 1;
    };
    auto operand = [&](ValueId in) -> uint32_t {
      auto it = reg_of.find(in);
      if (it != reg_of.end()) return it->second;
      uint32_t r = new_reg();
      const Value& v = graph_.value(in);
      if (v.data && v.data->dtype == DType::Float && v.data->numel() == 1) {
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Const), r,
                                     float_bits(static_cast<float>(v.data->float_at(0)))});
      } else {
        uint32_t m = map_for(tensor_of_.at(in));
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Load), r, m});
      }
      reg_of[in] = r;
      return r;
    };
    for (size_t ni : chain) {
      const Node& n = graph_.nodes[ni];
      std::vector<uint32_t> ops;
      if (n.op_type == "Clip") {
        ops.push_back(operand(n.inputs[0]));
      } else {
        for (ValueId in : n.inputs) ops.push_back(operand(in));
      }
      // Operands whose last use is this node free their registers before the result is
      // allocated, so the result may overwrite one (the tile loops allow d == s).
      if (n.op_type == "Clip") release(n.inputs[0]);
      else for (ValueId in : n.inputs) release(in);
      uint32_t r = new_reg();
      if (n.op_type == "Clip") {
        float lo = -INFINITY, hi = INFINITY;
        if (n.input(1) != kNoValue) lo = static_cast<float>(graph_.value(n.inputs[1]).data->float_at(0));
        if (n.input(2) != kNoValue) hi = static_cast<float>(graph_.value(n.inputs[2]).data->float_at(0));
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Clip), r, ops[0], float_bits(lo), float_bits(hi)});
      } else if (n.op_type == "Cast") {  // rounds through the target dtype (tile_kernels.h)
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Cast), r, ops[0],
                                     static_cast<uint32_t>(graph_.value(n.outputs[0]).dtype)});
      } else if (auto u = tile_unary(n.op_type)) {
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Unary), static_cast<uint32_t>(*u), r, ops[0]});
      } else {
        auto b = tile_binary(n.op_type);
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Binary), static_cast<uint32_t>(*b), r, ops[0], ops[1]});
      }
      reg_of[n.outputs[0]] = r;
    }
    uint32_t out_map = map_for(tensor_of_.at(g.output));
    k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Store), out_map, reg_of.at(g.output)});
    k.registers = std::max(k.registers, next_reg);
    CUVIL_ASSERT(k.registers <= 16, "tile kernel needs " << k.registers << " registers");
    out_.program.kernels.push_back(std::move(k));
    return static_cast<uint32_t>(out_.program.kernels.size()) - 1;
  }

  rt::NodeRecord node_record(const Node& n) {
    rt::NodeRecord r;
    r.op_type = n.op_type;
    r.domain = n.domain;
    r.name = n.name;
    r.opset = n.opset;
    for (ValueId in : n.inputs) r.inputs.push_back(in == kNoValue ? kNone : tensor_of_.at(in));
    for (ValueId o : n.outputs) r.outputs.push_back(o == kNoValue ? kNone : tensor_of_.at(o));
    for (const auto& [key, a] : n.attrs) {
      rt::AttrValue v;
      v.name = key;
      using K = Attribute::Kind;
      switch (a.kind) {
        case K::Int: v.kind = rt::AttrValue::Kind::kInt; v.ints = {a.i}; break;
        case K::Float: v.kind = rt::AttrValue::Kind::kFloat; v.floats = {a.f}; break;
        case K::String: v.kind = rt::AttrValue::Kind::kString; v.strings = {a.s}; break;
        case K::Ints: v.kind = rt::AttrValue::Kind::kInts; v.ints = a.ints; break;
        case K::Floats: v.kind = rt::AttrValue::Kind::kFloats; v.floats = a.floats; break;
        case K::Strings: v.kind = rt::AttrValue::Kind::kStrings; v.strings = a.strings; break;
        case K::Tensor:
          v.kind = rt::AttrValue::Kind::kTensor;
          v.tensor_dtype = a.t->dtype;
          v.ints = a.t->dims;
          v.tensor_bytes = a.t->bytes;
          break;
        default: continue;  // graphs, sparse tensors, type protos: no CPU kernel reads them
      }
      r.attrs.push_back(std::move(v));
    }
    return r;
  }

  // ---- steps, memory plan and code ----
  void plan_and_emit() {
    struct Step {
      bool kernel;
      size_t index;  // node index or group index
    };
    std::vector<Step> steps;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      int g = group_of_node_[i];
      if (g < 0) steps.push_back({false, i});
      else if (groups_[g].nodes.back() == i) steps.push_back({true, static_cast<size_t>(g)});
    }
    // Which tensors each step reads and writes (internal fused values are never stored).
    std::vector<std::vector<uint32_t>> reads(steps.size()), writes(steps.size());
    for (size_t s = 0; s < steps.size(); ++s) {
      if (!steps[s].kernel) {
        const Node& n = graph_.nodes[steps[s].index];
        for (ValueId in : n.inputs)
          if (in != kNoValue) reads[s].push_back(tensor_of_.at(in));
        for (ValueId o : n.outputs)
          if (o != kNoValue) writes[s].push_back(tensor_of_.at(o));
      } else {
        const Group& g = groups_[steps[s].index];
        std::set<ValueId> internal;
        for (size_t ni : g.nodes) internal.insert(graph_.nodes[ni].outputs[0]);
        for (size_t ni : g.nodes)
          for (ValueId in : graph_.nodes[ni].inputs)
            if (in != kNoValue && !internal.count(in)) reads[s].push_back(tensor_of_.at(in));
        writes[s].push_back(tensor_of_.at(g.output));
      }
    }
    std::map<uint32_t, std::pair<int, int>> life;  // tensor -> (def, last use)
    for (size_t s = 0; s < steps.size(); ++s) {
      for (uint32_t t : writes[s]) life[t] = {static_cast<int>(s), static_cast<int>(s)};
      for (uint32_t t : reads[s]) {
        auto it = life.find(t);
        if (it != life.end()) it->second.second = static_cast<int>(s);
      }
    }
    std::vector<PlanItem> items;
    std::vector<uint32_t> item_tensor;
    sym::DimExpr all_intermediates(0);
    for (const auto& [t, l] : life) {
      rt::TensorDesc& d = out_.program.tensors[t];
      if (d.kind != rt::TensorKind::kIntermediate) continue;
      const Shape& s = shapes_[t];
      DimExpr numel(1);
      for (const Dim& dim : s) numel = numel * *dim;
      DimExpr bytes = sym::ceildiv(numel * dtype_bits(d.dtype), 8);
      all_intermediates = all_intermediates + bytes;
      if (mentions_data_dependent(s)) continue;  // dynamic: heap at run time
      items.push_back({bytes, l.first, l.second});
      item_tensor.push_back(t);
    }
    MemoryPlan plan = plan_memory(items, model_.ranges);
    for (size_t i = 0; i < items.size(); ++i)
      out_.program.tensors[item_tensor[i]].arena_offset = expr(plan.offsets[i]);
    out_.program.arena_size = expr(sym::simplify(plan.arena_size, model_.ranges));
    out_.arena_expr = sym::simplify(plan.arena_size, model_.ranges).to_string();
    out_.intermediates_expr = sym::simplify(all_intermediates, model_.ranges).to_string();

    auto& code = out_.program.code;
    for (const Step& s : steps) {
      if (s.kernel) {
        uint32_t k = emit_kernel(groups_[s.index]);
        code.insert(code.end(), {static_cast<uint32_t>(rt::Opcode::RunKernel), k});
        out_.fused_kernels++;
        out_.fused_nodes += static_cast<int>(groups_[s.index].nodes.size());
      } else {
        out_.program.nodes.push_back(node_record(graph_.nodes[s.index]));
        code.insert(code.end(), {static_cast<uint32_t>(rt::Opcode::CallOp),
                                 static_cast<uint32_t>(out_.program.nodes.size() - 1)});
        out_.call_ops++;
      }
    }
    for (const auto& [dst, src] : output_copies_)
      code.insert(code.end(), {static_cast<uint32_t>(rt::Opcode::Copy), dst, src});
    code.push_back(static_cast<uint32_t>(rt::Opcode::End));
  }

  const Model& model_;
  const Graph& graph_;
  LowerOptions opt_;
  LoweredModel out_;
  std::set<std::string> input_symbols_;
  std::map<std::string, uint32_t> symbol_ids_;
  std::map<std::string, DimExpr> compound_symbols_;
  std::set<std::string> used_fresh_;
  std::map<std::string, uint32_t> expr_ids_;
  std::map<ValueId, uint32_t> tensor_of_;
  std::vector<Shape> shapes_;  // per tensor, every dim known
  std::vector<std::pair<uint32_t, uint32_t>> output_copies_;
  std::vector<Group> groups_;
  std::vector<int> group_of_node_;
};

}  // namespace

LoweredModel lower_model(const Model& model, const LowerOptions& options) {
  return Lowerer(model, options).run();
}

}  // namespace cuvil::codegen
