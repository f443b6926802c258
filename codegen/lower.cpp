#include "codegen/lower.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "codegen/memory_plan.h"
#include "codegen/strided_loads.h"
#include "codegen/tile_kernels.h"
#include "ir/unknown_shape.h"
#include "runtime/op_kernel.h"
#include "support/error.h"

namespace cuvil::codegen {
namespace {

using rt::kNone;

// ONNX op -> tile function, from the ISA table; Gelu picks its function by `approximate`.
std::optional<rt::UnaryFn> tile_unary(const Node& n) {
  if (n.op_type == "Gelu") {
    const std::string approx = n.attr_string("approximate", "none");
    if (approx == "none") return rt::UnaryFn::Gelu;
    if (approx == "tanh") return rt::UnaryFn::GeluTanh;
    return std::nullopt;  // the kernel reports the bad attribute
  }
#define CUVIL_TILE_UNARY(name, onnx) \
  if (n.op_type == #onnx) return rt::UnaryFn::name;
#include "runtime/isa.def"
#undef CUVIL_TILE_UNARY
  return std::nullopt;
}
// Table rows name ONNX ops plainly and cuvil's fused ops as cuvil::Op (runtime/isa.def).
std::optional<rt::BinaryFn> tile_binary(const Node& n) {
  const std::string op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
#define CUVIL_TILE_BINARY(name, onnx) \
  if (op == #onnx) return rt::BinaryFn::name;
#include "runtime/isa.def"
#undef CUVIL_TILE_BINARY
  return std::nullopt;
}

// cuvil::SiLU: the Silu tile instruction, which carries its alpha.
bool is_tile_silu(const Node& n) { return n.domain == "cuvil" && n.op_type == "SiLU"; }

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// "[batch, seq, 768]", for messages.
std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + (s[i] ? s[i]->to_string() : std::string("?"));
  return out + "]";
}

// "MatMul 'name'", for messages.
std::string op_label(const Node& n) { return n.op_type + " '" + n.name + "'"; }

// The inputs a node's tile form reads: Expand reads its data but not the shape (the kernel's
// domain is the output's shape), ConstantOfShape and a Range generator read nothing (a
// Range's start and delta are immediates, its length the domain), Clip's bounds are immediates,
// a reshaping copy reads only its data, and a strided load (Slice, Gather over an index
// progression) only its data: its starts/ends or indices are in the access map. Everything
// else reads all its inputs.
std::vector<ValueId> tile_reads(const Node& n) {
  if (n.op == OpKind::ConstantOfShape || n.op == OpKind::Range) return {};
  if (n.op == OpKind::Expand || n.op == OpKind::Clip || n.op == OpKind::Reshape || n.op == OpKind::Flatten ||
      n.op == OpKind::Squeeze || n.op == OpKind::Unsqueeze || n.op == OpKind::Slice || n.op == OpKind::Gather)
    return {n.inputs.at(0)};
  std::vector<ValueId> out;
  for (ValueId in : n.inputs)
    if (in != kNoValue) out.push_back(in);
  return out;
}

// Dtypes a tile register (float32) holds exactly, so a kernel that only moves them (a reshaping
// copy, an Expand, a Where) is exact.
bool float32_exact(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16 || t == DType::Int8 ||
         t == DType::UInt8 || t == DType::Bool;
}

class Lowerer {
 public:
  Lowerer(const Model& m, const LowerOptions& o) : model_(m), graph_(*m.graph), opt_(o) {}

  LoweredModel run() {
    check_supported();
    collect_input_symbols();
    make_input_tensors();
    lower_graph(graph_);
    make_output_tensors();
    fill_loop_scopes();
    plan_and_emit();
    out_.program.weights_size = out_.weights_size;
    return std::move(out_);
  }

 private:
  // ---- checks ----
  // Every op of the graph and its subgraphs needs a whole-tensor kernel, a tile form or (If,
  // Loop, Scan) a program-level lowering.
  void collect_unsupported(const Graph& g, std::map<std::string, std::vector<std::string>>& missing) {
    for (const Node& n : g.nodes) {
      if (op_flags(n.op) & kControlFlow) {
        for (const auto& [key, a] : n.attrs)
          if (a.kind == Attribute::Kind::Graph && a.g) collect_unsupported(*a.g, missing);
        continue;
      }
      if (!rt::find_op_kernel(n.domain, n.op_type))
        missing[(n.domain.empty() ? "" : n.domain + "::") + n.op_type].push_back(n.name);
    }
  }

  void check_supported() {
    std::map<std::string, std::vector<std::string>> missing;
    collect_unsupported(graph_, missing);
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

  // The graph (the model's or a subgraph) that holds `v`, or null.
  static const Graph* graph_holding(const Graph& g, const Value& v) {
    const std::less<const Value*> before;
    if (!g.values.empty() && !before(&v, &g.values.front()) && !before(&g.values.back(), &v)) return &g;
    for (const Node& n : g.nodes)
      for (const auto& [key, a] : n.attrs) {
        if (a.g)
          if (const Graph* r = graph_holding(*a.g, v)) return r;
        for (const auto& sub : a.graphs)
          if (const Graph* r = graph_holding(*sub, v)) return r;
      }
    return nullptr;
  }
  std::string unknown_rank_cause(const Value& v) const {
    const Graph* g = graph_holding(graph_, v);
    return g ? why_shape_unknown(*g, v) : std::string("shape inference could not derive it");
  }

  // Shape with unknown dims replaced by fresh data-dependent symbols.
  Shape complete_shape(const Value& v) {
    if (v.kind != ValueKind::Tensor)
      fail(ExitCode::kUnsupported, "value '", v.name, "' is a ", value_kind_name(v.kind),
           "; the code generator handles tensors only");
    if (!v.shape)
      fail(ExitCode::kUnsupported, "value '", v.name, "' has unknown rank (", unknown_rank_cause(v),
           "); the code generator needs every rank (`cuvilc inspect` lists every value whose shape is unknown)");
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
  uint32_t add_tensor(const std::string& name, DType dtype, rt::TensorKind kind, const Shape& shape) {
    // The package verifier refuses string tensors and unknown dtypes: refuse them here, by
    // name, instead of writing a package the loader rejects.
    if (dtype == DType::String)
      fail(ExitCode::kUnsupported, "value '", name,
           "' is a string tensor; the runtime does not support string tensors");
    if (dtype == DType::Undefined)
      fail(ExitCode::kUnsupported, "value '", name,
           "' has no known element type (shape inference could not derive it)");
    rt::TensorDesc t;
    t.name = name;
    t.kind = kind;
    t.dtype = dtype;
    for (const Dim& d : shape) t.dims.push_back(expr(*d));
    uint32_t id = static_cast<uint32_t>(out_.program.tensors.size());
    out_.program.tensors.push_back(t);
    shapes_.push_back(shape);
    tensor_loops_.push_back(loop_stack_);
    return id;
  }
  uint32_t add_tensor(const Value& v, rt::TensorKind kind, const Shape& shape) {
    return add_tensor(v.name, v.dtype, kind, shape);
  }

  // The tensor of value `id` of graph `g`; captures resolve to the enclosing graph's tensor.
  uint32_t tensor(const Graph& g, ValueId id) const {
    auto it = tensor_of_.find({&g, id});
    if (it != tensor_of_.end()) return it->second;
    const Value& v = g.value(id);
    CUVIL_ASSERT(v.outer != kNoValue && g.parent, "value '" << v.name << "' has no tensor");
    return tensor(*g.parent, v.outer);
  }
  const Shape& shape_of(const Graph& g, ValueId id) const { return shapes_[tensor(g, id)]; }

  // Values of `g` read by its subgraphs (captures of the subgraphs of its nodes).
  static std::set<ValueId> captured(const Graph& g) {
    std::set<ValueId> out;
    for (const Node& n : g.nodes)
      for (const auto& [key, a] : n.attrs)
        if (a.kind == Attribute::Kind::Graph && a.g)
          for (ValueId c : a.g->captures) out.insert(a.g->value(c).outer);
    return out;
  }

  void make_input_tensors() {
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      const Value& v = graph_.value(graph_.inputs[i]);
      uint32_t t = add_tensor(v, rt::TensorKind::kInput, complete_shape(v));
      out_.program.tensors[t].io_index = static_cast<uint32_t>(i);
      out_.program.inputs.push_back(t);
      tensor_of_[{&graph_, graph_.inputs[i]}] = t;
    }
  }

  // Weights and node outputs of `g` (its inputs are mapped by the caller).
  void make_graph_tensors(const Graph& g) {
    std::set<ValueId> used = captured(g);
    for (const Node& n : g.nodes)
      for (ValueId in : n.inputs)
        if (in != kNoValue) used.insert(in);
    for (ValueId o : g.outputs) used.insert(o);
    for (ValueId id = 0; id < static_cast<ValueId>(g.values.size()); ++id) {
      const Value& v = g.value(id);
      if (!v.is_initializer || !used.count(id)) continue;
      Shape s;
      for (int64_t d : v.data->dims) s.emplace_back(DimExpr(d));
      uint32_t t = add_tensor(v, rt::TensorKind::kWeight, s);
      // Weights are not copied: the package writer streams them from the model's tensors.
      out_.weights_size = (out_.weights_size + 63) / 64 * 64;
      out_.program.tensors[t].weight_offset = out_.weights_size;
      out_.program.tensors[t].weight_size = v.data->bytes.size();
      out_.weight_pieces.push_back({out_.weights_size, v.data});
      out_.weights_size += v.data->bytes.size();
      tensor_of_[{&g, id}] = t;
    }
    const bool top = &g == &graph_;
    std::set<ValueId> outputs(g.outputs.begin(), g.outputs.end());
    for (const Node& n : g.nodes)
      for (ValueId o : n.outputs) {
        if (o == kNoValue) continue;
        const Value& v = g.value(o);
        bool is_out = top && outputs.count(o) != 0;
        tensor_of_[{&g, o}] = add_tensor(v, is_out ? rt::TensorKind::kOutput : rt::TensorKind::kIntermediate,
                                         complete_shape(v));
      }
  }

  // Graph outputs: produced by a node, or copies of inputs/weights.
  void make_output_tensors() {
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      ValueId o = graph_.outputs[i];
      const Value& v = graph_.value(o);
      uint32_t t;
      if (v.producer >= 0) {
        t = tensor(graph_, o);
      } else {
        t = add_tensor(v, rt::TensorKind::kOutput, complete_shape(v));
        output_copies_.emplace_back(t, tensor(graph_, o));
      }
      out_.program.tensors[t].io_index = static_cast<uint32_t>(i);
      out_.program.outputs.push_back(t);
    }
  }

  // ---- fusion into tile kernels ----
  struct Group {
    const Graph* graph = nullptr;
    std::vector<size_t> nodes;  // in topological order
    ValueId output = kNoValue;
    Shape domain;
    bool loop = false;  // one node lowered by codegen/tile_kernels (reduction loop)
    // A reshaping node (Reshape, Flatten, Squeeze, Unsqueeze) lowered as a copy over the
    // flattened element count: its domain is [numel], and no other node joins it.
    bool copy = false;
  };

  tile::KernelContext kernel_context(const Graph& g) {
    return {g, model_.ranges, [this](const DimExpr& e) { return expr(e); },
            [this, &g](ValueId v) { return tensor(g, v); },
            [this, &g](ValueId v) -> const Shape& { return shape_of(g, v); }};
  }

  // A node that becomes a loop kernel of its own (codegen/tile_kernels.h); its shapes must
  // not wait on data, since a kernel's extents are evaluated before it runs.
  bool loop_kernel(const Graph& g, const Node& n) {
    for (ValueId v : n.inputs)
      if (v != kNoValue && mentions_data_dependent(shape_of(g, v))) return false;
    for (ValueId v : n.outputs)
      if (v == kNoValue || mentions_data_dependent(shape_of(g, v))) return false;
    return tile::is_loop_kernel(n, kernel_context(g));
  }

  static bool is_f32(const Graph& g, ValueId id) {
    return id != kNoValue && g.value(id).dtype == DType::Float;
  }

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

  // Transpose's `perm` (default: reversed axes), or nothing when it is not a permutation.
  static std::optional<std::vector<int64_t>> transpose_perm(const Node& n, size_t rank) {
    std::vector<int64_t> perm;
    if (auto p = n.attr_ints("perm")) {
      perm = *p;
    } else {
      for (size_t k = rank; k-- > 0;) perm.push_back(static_cast<int64_t>(k));
    }
    if (perm.size() != rank) return std::nullopt;
    std::vector<bool> seen(rank, false);
    for (int64_t a : perm) {
      if (a < 0 || static_cast<size_t>(a) >= rank || seen[static_cast<size_t>(a)]) return std::nullopt;
      seen[static_cast<size_t>(a)] = true;
    }
    return perm;
  }

  // perm is [0, 2, ..., r-1, 1] or [0, r-1, 1, ..., r-2] with r >= 3.
  static bool moves_channel_axis(const std::vector<int64_t>& perm) {
    const int64_t r = static_cast<int64_t>(perm.size());
    if (r < 3 || perm[0] != 0) return false;
    bool to_last = perm[static_cast<size_t>(r - 1)] == 1, to_second = perm[1] == r - 1;
    for (int64_t i = 1; i + 1 < r; ++i) to_last = to_last && perm[static_cast<size_t>(i)] == i + 1;
    for (int64_t i = 2; i < r; ++i) to_second = to_second && perm[static_cast<size_t>(i)] == i - 1;
    return to_last || to_second;
  }

  bool fusible(const Graph& g, const Node& n) const {
    // A node whose output is left unnamed ("") has nothing for a kernel to store.
    if (n.outputs.empty() || n.outputs[0] == kNoValue) return false;
    // A Slice or Gather read through one map, like a Transpose, starts a kernel; it moves its
    // data's dtype through a float32 register, so that dtype must survive it exactly.
    if (n.op == OpKind::Slice || n.op == OpKind::Gather) {
      if (n.outputs.size() != 1 || !float32_exact(g.value(n.outputs[0]).dtype) ||
          g.value(n.outputs[0]).dtype != g.value(n.inputs[0]).dtype)
        return false;
      return strided_load(g, n).has_value();
    }
    if (tile::fusible_cast(n, g)) {
      const Shape& domain = shape_of(g, n.outputs[0]);
      return !mentions_data_dependent(domain) && broadcastable(shape_of(g, n.inputs[0]), domain);
    }
    if (n.outputs.size() != 1 || !is_f32(g, n.outputs[0])) return false;
    // A float32 Range with constant start and delta: an Iota over its output's (symbolic)
    // length, so the limit's shape arithmetic is not run-time work.
    if (n.op == OpKind::Range) return range_immediates(g, n).has_value() && !mentions_data_dependent(shape_of(g, n.outputs[0]));
    // A Transpose loads its input through a map with permuted strides; it starts a kernel (its
    // input is read from memory, never from a register) and later nodes may join it. Except a
    // move of the channel axis between second and last (NCHW <-> NHWC, as choose-layout
    // inserts them): that is a transpose of [C, H*W] matrices, which the whole-tensor kernel
    // does in cache blocks at about copy speed, where a tile load would gather every element.
    if (n.op == OpKind::Transpose) {
      const Shape& domain = shape_of(g, n.outputs[0]);
      const std::optional<std::vector<int64_t>> perm = transpose_perm(n, domain.size());
      return n.inputs.size() == 1 && is_f32(g, n.inputs[0]) && !mentions_data_dependent(domain) &&
             perm.has_value() && !moves_channel_axis(*perm);
    }
    // Generators and selections over symbolic extents: the kernel's domain is the output's
    // shape, so the shape operand of Expand/ConstantOfShape is never read at run time.
    if (n.op == OpKind::Expand || n.op == OpKind::ConstantOfShape || n.op == OpKind::Where) {
      const Shape& domain = shape_of(g, n.outputs[0]);
      if (mentions_data_dependent(domain)) return false;
      if (n.op == OpKind::ConstantOfShape) {
        const Attribute* value = n.attr("value");
        return !value || (value->kind == Attribute::Kind::Tensor && value->t && value->t->dtype == DType::Float &&
                          value->t->numel() == 1);
      }
      if (n.op == OpKind::Expand) return is_f32(g, n.inputs[0]) && broadcastable(shape_of(g, n.inputs[0]), domain);
      if (n.inputs.size() != 3) return false;
      const DType cond = g.value(n.inputs[0]).dtype;
      if (cond != DType::Bool && cond != DType::Float) return false;
      for (ValueId in : n.inputs)
        if (!broadcastable(shape_of(g, in), domain)) return false;
      return is_f32(g, n.inputs[1]) && is_f32(g, n.inputs[2]);
    }
    const bool unary = (n.domain.empty() && tile_unary(n).has_value()) || (is_tile_silu(n) && n.inputs.size() == 1);
    const bool binary = tile_binary(n).has_value() && n.inputs.size() == 2;
    const bool clip = n.op_type == "Clip";
    if (!unary && !binary && !clip) return false;
    if (n.op_type == "Identity" && n.inputs.size() != 1) return false;
    const Shape& domain = shape_of(g, n.outputs[0]);
    // A kernel's domain is evaluated before it runs, so it must not wait on data.
    if (mentions_data_dependent(domain)) return false;
    if (clip) {
      if (n.opset < 11) return false;  // attribute form: leave to the kernel
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        ValueId b = n.inputs[i];
        if (b == kNoValue) continue;
        const Value& v = g.value(b);
        if (!v.data || v.data->dtype != DType::Float || v.data->numel() != 1) return false;
      }
      return is_f32(g, n.inputs[0]) && broadcastable(shape_of(g, n.inputs[0]), domain);
    }
    for (ValueId in : n.inputs) {
      if (!is_f32(g, in)) return false;
      if (!broadcastable(shape_of(g, in), domain)) return false;
    }
    return true;
  }

  // A Reshape/Flatten/Squeeze/Unsqueeze becomes a copy kernel over [numel] when its output
  // shape is known as expressions (so its shape operand, often a cuvil::SymbolicInts, is not
  // needed at run time), provably has the input's element count, and the dtype survives the
  // float32 registers exactly. The whole-tensor kernel checks the element count at run time;
  // here the proof stands in for that check.
  bool copy_kernel(const Graph& g, const Node& n) const {
    if (n.op != OpKind::Reshape && n.op != OpKind::Flatten && n.op != OpKind::Squeeze &&
        n.op != OpKind::Unsqueeze)
      return false;
    if (n.outputs.size() != 1 || n.outputs[0] == kNoValue || n.inputs.empty() || n.inputs[0] == kNoValue)
      return false;
    if (!float32_exact(g.value(n.inputs[0]).dtype) || g.value(n.outputs[0]).dtype != g.value(n.inputs[0]).dtype)
      return false;
    const Shape& in = shape_of(g, n.inputs[0]);
    const Shape& out = shape_of(g, n.outputs[0]);
    if (mentions_data_dependent(in) || mentions_data_dependent(out)) return false;
    return sym::prove_equal(element_count(in), element_count(out), model_.ranges);
  }
  static DimExpr element_count(const Shape& s) {
    DimExpr numel(1);
    for (const Dim& d : s) numel = numel * *d;
    return numel;
  }

  // ---- strided loads (codegen/strided_loads.h) over this lowering's shapes ----
  LoadContext load_context(const Graph& g) const {
    return {g, model_.ranges, [this, &g](ValueId v) -> const Shape& { return shape_of(g, v); },
            [this](const Shape& s) { return mentions_data_dependent(s); }};
  }
  std::optional<StridedLoad> strided_load(const Graph& g, const Node& n) const {
    return codegen::strided_load(load_context(g), n);
  }
  std::optional<StridedLoad> slice_load(const Graph& g, const Node& n) const {
    return codegen::slice_load(load_context(g), n);
  }
  std::optional<StridedLoad> gather_load(const Graph& g, const Node& n) const {
    return codegen::gather_load(load_context(g), n);
  }
  ValueId reshape_source(const Graph& g, ValueId v) const { return codegen::reshape_source(load_context(g), v); }

  // A Range's start and delta when both are float32 constants (the Iota's immediates).
  static std::optional<std::pair<float, float>> range_immediates(const Graph& g, const Node& n) {
    if (n.op != OpKind::Range || n.inputs.size() != 3) return std::nullopt;
    auto scalar = [&](ValueId id) -> std::optional<float> {
      if (id == kNoValue) return std::nullopt;
      const Value& v = g.value(id);
      if (!v.data || v.data->dtype != DType::Float || v.data->numel() != 1) return std::nullopt;
      return static_cast<float>(v.data->float_at(0));
    };
    auto start = scalar(n.inputs[0]), delta = scalar(n.inputs[2]);
    if (!start || !delta) return std::nullopt;
    return std::make_pair(*start, *delta);
  }

  // What node `ni` of group `grp` reads from memory: its tile reads, where an elementwise
  // operand that reshapes another tensor is that tensor (reshape_source). A loop kernel's own
  // operands, a copy's input and a strided load's data are read as they are.
  std::vector<ValueId> kernel_reads(const Graph& g, const Group& grp, size_t ni) const {
    const Node& n = g.nodes[ni];
    std::vector<ValueId> reads = tile_reads(n);
    const bool by_map = !(grp.loop && ni == grp.nodes[0]) && !grp.copy && n.op != OpKind::Transpose &&
                        n.op != OpKind::Slice && n.op != OpKind::Gather;
    if (by_map)
      for (ValueId& v : reads) v = reshape_source(g, v);
    return reads;
  }

  // Groups fusible chains of `g`; returns the group index per node (-1: not fused).
  std::vector<int> group_nodes(const Graph& g) {
    std::map<ValueId, int> consumers;
    for (const Node& n : g.nodes)
      for (ValueId in : n.inputs)
        if (in != kNoValue) consumers[in]++;
    for (ValueId o : g.outputs) consumers[o] += 2;  // never internal
    for (ValueId c : captured(g)) consumers[c] += 2;  // read by a subgraph: must be stored
    std::map<ValueId, int> group_of_value;  // group output value -> group index
    std::vector<int> group_of_node(g.nodes.size(), -1);
    // A value read by several nodes can stay in a register of one kernel when a user's fuse
    // request holds all its readers (a diamond such as a * Sigmoid(a)): the greedy rule alone
    // grows kernels only through single-reader values. Should a reader end up elsewhere after
    // all, check_fuse_requests refuses the compile, so no kernel reads an unstored value.
    std::map<std::string, size_t> request_of;  // node name -> fuse request
    for (size_t r = 0; r < opt_.fuse.size(); ++r)
      for (const std::string& name : opt_.fuse[r].nodes) request_of.emplace(name, r);
    auto readers_in_request = [&](ValueId v, const Node& reader) {
      auto it = request_of.find(reader.name);
      if (it == request_of.end()) return false;
      int readers = 0;
      for (const Node& m : g.nodes)
        for (ValueId in : m.inputs) {
          if (in != v) continue;
          auto jt = request_of.find(m.name);
          if (jt == request_of.end() || jt->second != it->second) return false;
          ++readers;
        }
      return readers == consumers[v];  // graph outputs and captures count 2 each: never equal
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (opt_.keep_unfused.count(n.name)) continue;
      if (opt_.fuse_elementwise && loop_kernel(g, n)) {  // elementwise ops may join as an epilogue
        groups_.push_back(Group{&g, {i}, n.outputs[0], shape_of(g, n.outputs[0]), true});
        group_of_node[i] = static_cast<int>(groups_.size()) - 1;
        group_of_value[n.outputs[0]] = group_of_node[i];
        continue;
      }
      if (opt_.fuse_elementwise && copy_kernel(g, n)) {
        Group grp{&g, {i}, n.outputs[0], Shape{Dim(element_count(shape_of(g, n.outputs[0])))}, false, true};
        groups_.push_back(std::move(grp));
        group_of_node[i] = static_cast<int>(groups_.size()) - 1;
        continue;  // not a group output others join: its domain is the flattened count
      }
      if (!opt_.fuse_elementwise || !fusible(g, n)) continue;
      const Shape& domain = shape_of(g, n.outputs[0]);
      int join = -1;
      std::vector<std::string> blocked;  // why it could not join a producer's kernel
      for (ValueId in : n.inputs) {
        // Reads its input from memory through its own map: starts a kernel.
        if (n.op == OpKind::Transpose || n.op == OpKind::Slice || n.op == OpKind::Gather) break;
        auto it = group_of_value.find(in);
        if (it == group_of_value.end()) continue;
        const Node& producer = g.nodes[groups_[it->second].nodes.back()];
        if (consumers[in] != 1 && !readers_in_request(in, n)) {
          blocked.push_back(op_label(producer) + " has " + std::to_string(consumers[in]) +
                            " readers, so its value is stored and " + op_label(n) + " starts a new kernel");
          continue;
        }
        Group& grp = groups_[it->second];
        if (grp.output != in) continue;
        if (grp.domain.size() != domain.size()) {
          blocked.push_back(op_label(n) + " iterates over a different shape than " + op_label(producer));
          continue;
        }
        bool same = true;
        for (size_t k = 0; k < domain.size(); ++k)
          same = same && sym::prove_equal(*grp.domain[k], *domain[k], model_.ranges);
        // Keeps live registers <= 16 (a loop kernel uses up to 3 of its own).
        if (same && grp.nodes.size() < (grp.loop ? 9u : 12u)) {
          join = it->second;
          break;
        }
        blocked.push_back(same ? op_label(n) + " would make " + op_label(producer) + "'s kernel longer than " +
                                     std::to_string(grp.loop ? 9 : 12) + " ops (16 registers)"
                               : op_label(n) + " iterates over a different shape than " + op_label(producer));
      }
      if (join < 0)
        for (std::string& why : blocked) out_.not_fused.push_back({n.name, n.op_type, std::move(why)});
      blocked.clear();
      if (join < 0) {
        groups_.push_back(Group{});
        join = static_cast<int>(groups_.size()) - 1;
        groups_[join].graph = &g;
        groups_[join].domain = domain;
      } else {
        group_of_value.erase(groups_[join].output);
      }
      groups_[join].nodes.push_back(i);
      groups_[join].output = n.outputs[0];
      group_of_value[n.outputs[0]] = join;
      group_of_node[i] = join;
    }
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (group_of_node[i] < 0)
        if (std::string why = why_not_tile(g, g.nodes[i]); !why.empty())
          out_.not_fused.push_back({g.nodes[i].name, g.nodes[i].op_type, std::move(why)});
    check_fuse_requests(g, group_of_node);
    return group_of_node;
  }

  // Why node `n` (not fused) is an op call rather than part of a tile kernel, in words for
  // the compile report; "" for nodes that are not candidates (control flow).
  std::string why_not_tile(const Graph& g, const Node& n) const {
    if (op_flags(n.op) & kControlFlow) return "";
    if (opt_.keep_unfused.count(n.name)) return "a keep pattern names it";
    if (!opt_.fuse_elementwise) return "fusion is off (--no-fusion)";
    if (n.op == OpKind::Gather && !gather_load(g, n))
      return "its indices are not a progression known at compile time (a Range, a constant) over known shapes";
    if (n.op == OpKind::Slice && !slice_load(g, n))
      return "its starts, ends, axes or steps are not known at compile time";
    if (n.op == OpKind::Range && !range_immediates(g, n))
      return "its start and delta are not float32 constants (an int64 Range is a tile form only as a Gather's indices)";
    const bool has_form = (n.domain.empty() && tile_unary(n)) || is_tile_silu(n) || tile_binary(n) || n.op_type == "Clip" || n.op == OpKind::Cast ||
                          n.op == OpKind::Expand || n.op == OpKind::ConstantOfShape || n.op == OpKind::Where ||
                          n.op == OpKind::Reshape || n.op == OpKind::Flatten || n.op == OpKind::Squeeze ||
                          n.op == OpKind::Unsqueeze || n.op == OpKind::Transpose || n.op == OpKind::Slice ||
                          n.op == OpKind::Gather || n.op == OpKind::Range;
    if (!has_form) return n.op_type + " has no tile form yet";
    for (ValueId o : n.outputs)
      if (o != kNoValue && mentions_data_dependent(shape_of(g, o))) return "its output's shape depends on data";
    for (ValueId v : n.outputs)
      if (v != kNoValue && !float32_exact(g.value(v).dtype))
        return "output '" + g.value(v).name + "' is " + dtype_name(g.value(v).dtype) +
               "; tile registers are float32 (exact for f32, f16, bf16, i8, u8, bool)";
    if (n.op == OpKind::Cast) return "this cast is not exact through float32 registers";
    const Shape& domain = shape_of(g, n.outputs[0]);
    for (ValueId in : tile_reads(n))
      if (!broadcastable(shape_of(g, in), domain))
        return "input '" + g.value(in).name + "' " + shape_text(shape_of(g, in)) +
               " is not provably the output's shape " + shape_text(domain) + " or a broadcast of it";
    return "an input is not float32";
  }

  // Every fuse request whose nodes are in `g` must be one group; otherwise say why not.
  void check_fuse_requests(const Graph& g, const std::vector<int>& group_of_node) const {
    std::map<std::string, size_t> index_of;
    for (size_t i = 0; i < g.nodes.size(); ++i) index_of.emplace(g.nodes[i].name, i);
    for (const FuseRequest& r : opt_.fuse) {
      if (r.nodes.empty() || !index_of.count(r.nodes.front())) continue;
      std::set<int> groups;
      std::string list;
      for (const std::string& name : r.nodes) list += (list.empty() ? "'" : ", '") + name + "'";
      for (const std::string& name : r.nodes) {
        auto it = index_of.find(name);
        if (it == index_of.end()) continue;
        const Node& n = g.nodes[it->second];
        const int grp = group_of_node[it->second];
        if (grp < 0)
          fail(ExitCode::kUnsupported, "pattern '", r.pattern, "' asks to fuse ", list, " into one tile kernel, but node '",
               name, "' (", n.op_type, ") has no tile form here",
               opt_.fuse_elementwise ? (opt_.keep_unfused.count(name) ? " (a keep pattern names it)"
                                                                       : " (tile kernels take float32 elementwise ops, exact "
                                                                         "casts, and reductions or MatMul/Gemm with "
                                                                         "elementwise epilogues)")
                                     : " (fusion is off)");
        groups.insert(grp);
      }
      if (groups.size() > 1)
        fail(ExitCode::kUnsupported, "pattern '", r.pattern, "' asks to fuse ", list, " into one tile kernel, but they fall into ",
             groups.size(), " kernels (a kernel grows only through a value with one reader, over the same iteration "
             "domain, up to 12 ops)");
    }
  }

  // Builds the tile kernel of a group; returns its index.
  uint32_t emit_kernel(const Group& grp) {
    const Graph& g = *grp.graph;
    rt::TileKernel k;
    std::map<ValueId, uint32_t> reg_of;
    uint32_t next_reg = 0;
    // A loop group starts from its loop kernel (codegen/tile_kernels.h); the elementwise
    // nodes after it extend the finish section, which ends with the store below.
    const std::vector<size_t> chain(grp.nodes.begin() + (grp.loop ? 1 : 0), grp.nodes.end());
    if (grp.loop) {
      tile::LoopKernel lk = tile::emit_loop_kernel(g.nodes[grp.nodes[0]], kernel_context(g));
      k = std::move(lk.kernel);
      next_reg = k.registers;
      reg_of[g.nodes[grp.nodes[0]].outputs[0]] = lk.result;
    } else {
      for (const Dim& d : grp.domain) k.domain.push_back(expr(*d));
    }
    const Node& last = g.nodes[grp.nodes.back()];
    k.name = last.name;
    // Registers are reused once the value they hold has no further use in the body.
    std::map<ValueId, int> uses;
    for (size_t ni : chain) {
      const OpKind op = g.nodes[ni].op;
      // Loads its own permuted or strided copy, never a register.
      if (op != OpKind::Transpose && op != OpKind::Slice && op != OpKind::Gather)
        for (ValueId in : tile_reads(g.nodes[ni])) uses[in]++;
    }
    uses[grp.output]++;  // the final store
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
    // Tensor `tensor_id` read over the domain as if it had shape `s` (its own, or that of a
    // reshape of it: reshape_source).
    auto map_for_shape = [&](uint32_t tensor_id, const Shape& s) -> uint32_t {
      rt::AccessMap m;
      m.tensor = tensor_id;
      m.offset = expr(DimExpr(0));
      std::vector<DimExpr> strides(grp.domain.size(), DimExpr(0));
      DimExpr stride(1);
      for (size_t kk = s.size(); kk-- > 0;) {
        size_t dk = kk + grp.domain.size() - s.size();
        bool bcast = s[kk]->constant() == 1 && grp.domain[dk]->constant() != 1;
        strides[dk] = bcast ? DimExpr(0) : stride;
        stride = stride * *s[kk];
      }
      for (const DimExpr& st : strides) m.strides.push_back(expr(st));
      k.maps.push_back(m);
      return static_cast<uint32_t>(k.maps.size()) - 1;
    };
    auto map_for = [&](uint32_t tensor_id) { return map_for_shape(tensor_id, shapes_[tensor_id]); };
    auto operand = [&](ValueId in) -> uint32_t {
      auto it = reg_of.find(in);
      if (it != reg_of.end()) return it->second;
      uint32_t r = new_reg();
      const Value& v = g.value(in);
      if (v.data && v.data->dtype == DType::Float && v.data->numel() == 1) {
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Const), r,
                                     float_bits(static_cast<float>(v.data->float_at(0)))});
      } else {
        uint32_t m = map_for_shape(tensor(g, reshape_source(g, in)), shape_of(g, in));
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Load), r, m});
      }
      reg_of[in] = r;
      return r;
    };
    if (grp.copy) {  // [numel] over both tensors, contiguous: Load, Store
      const Node& n = g.nodes[grp.nodes[0]];
      auto flat_map = [&](uint32_t tensor_id) {
        rt::AccessMap m;
        m.tensor = tensor_id;
        m.offset = expr(DimExpr(0));
        m.strides = {expr(DimExpr(1))};
        k.maps.push_back(m);
        return static_cast<uint32_t>(k.maps.size()) - 1;
      };
      const uint32_t in_map = flat_map(tensor(g, n.inputs[0])), out_map = flat_map(tensor(g, n.outputs[0]));
      k.body = {static_cast<uint32_t>(rt::TileOpcode::Load), 0, in_map, static_cast<uint32_t>(rt::TileOpcode::Store),
                out_map, 0};
      k.registers = 1;
      out_.program.kernels.push_back(std::move(k));
      return static_cast<uint32_t>(out_.program.kernels.size()) - 1;
    }
    for (size_t ni : chain) {
      const Node& n = g.nodes[ni];
      if (n.op == OpKind::Transpose) {
        // Output dim k is input axis perm[k]: the load's stride for domain dim k is the input's
        // stride of that axis. The register holds the transposed value only (not the input's).
        const std::vector<int64_t> perm = *transpose_perm(n, grp.domain.size());
        const uint32_t in_tensor = tensor(g, n.inputs[0]);
        const Shape& in_shape = shapes_[in_tensor];
        std::vector<DimExpr> in_strides(in_shape.size(), DimExpr(1));
        for (size_t kk = in_shape.size(); kk-- > 1;) in_strides[kk - 1] = in_strides[kk] * *in_shape[kk];
        rt::AccessMap m;
        m.tensor = in_tensor;
        m.offset = expr(DimExpr(0));
        for (int64_t axis : perm) m.strides.push_back(expr(in_strides[static_cast<size_t>(axis)]));
        k.maps.push_back(m);
        const uint32_t r = new_reg();
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Load), r,
                                     static_cast<uint32_t>(k.maps.size()) - 1});
        reg_of[n.outputs[0]] = r;
        continue;
      }
      if (auto l = strided_load(g, n); l && (n.op == OpKind::Slice || n.op == OpKind::Gather)) {
        rt::AccessMap m;
        m.tensor = tensor(g, l->source);
        m.offset = expr(l->offset);
        for (const DimExpr& st : l->strides) m.strides.push_back(expr(st));
        k.maps.push_back(m);
        const uint32_t r = new_reg();
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Load), r,
                                     static_cast<uint32_t>(k.maps.size()) - 1});
        reg_of[n.outputs[0]] = r;
        continue;
      }
      const std::vector<ValueId> reads = tile_reads(n);
      std::vector<uint32_t> ops;
      for (ValueId in : reads) ops.push_back(operand(in));
      // Operands whose last use is this node free their registers before the result is
      // allocated, so the result may overwrite one (the tile loops allow d == s).
      for (ValueId in : reads) release(in);
      uint32_t r = new_reg();
      if (n.op == OpKind::Range) {  // the element's index in the domain, scaled and offset
        const auto [start, delta] = *range_immediates(g, n);
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Iota), r, float_bits(start), float_bits(delta)});
      } else if (n.op == OpKind::ConstantOfShape) {  // the value attribute, 0 when absent
        const Attribute* value = n.attr("value");
        const float f = value ? static_cast<float>(value->t->float_at(0)) : 0.0f;
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Const), r, float_bits(f)});
      } else if (n.op == OpKind::Expand) {  // the broadcast is in the input's map
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Unary),
                                     static_cast<uint32_t>(rt::UnaryFn::Identity), r, ops[0]});
      } else if (n.op == OpKind::Where) {
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Select), r, ops[0], ops[1], ops[2]});
      } else if (n.op_type == "Clip") {
        float lo = -INFINITY, hi = INFINITY;
        if (n.input(1) != kNoValue) lo = static_cast<float>(g.value(n.inputs[1]).data->float_at(0));
        if (n.input(2) != kNoValue) hi = static_cast<float>(g.value(n.inputs[2]).data->float_at(0));
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Clip), r, ops[0], float_bits(lo), float_bits(hi)});
      } else if (n.op_type == "Cast") {  // rounds through the target dtype (tile_kernels.h)
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Cast), r, ops[0],
                                     static_cast<uint32_t>(g.value(n.outputs[0]).dtype)});
      } else if (is_tile_silu(n)) {
        const float alpha = n.attr_float("alpha", 1.0f);
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Silu), r, ops[0], float_bits(alpha)});
      } else if (auto u = tile_unary(n)) {
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Unary), static_cast<uint32_t>(*u), r, ops[0]});
      } else {
        auto b = tile_binary(n);
        k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Binary), static_cast<uint32_t>(*b), r, ops[0], ops[1]});
      }
      reg_of[n.outputs[0]] = r;
    }
    uint32_t out_map = map_for(tensor(g, grp.output));
    k.body.insert(k.body.end(), {static_cast<uint32_t>(rt::TileOpcode::Store), out_map, reg_of.at(grp.output)});
    k.registers = std::max(k.registers, next_reg);
    CUVIL_ASSERT(k.registers <= 16, "tile kernel needs " << k.registers << " registers");
    out_.program.kernels.push_back(std::move(k));
    return static_cast<uint32_t>(out_.program.kernels.size()) - 1;
  }

  rt::NodeRecord node_record(const Graph& g, const Node& n) {
    rt::NodeRecord r;
    r.op_type = n.op_type;
    r.domain = n.domain;
    r.name = n.name;
    r.opset = n.opset;
    for (ValueId in : n.inputs) r.inputs.push_back(in == kNoValue ? kNone : tensor(g, in));
    for (ValueId o : n.outputs) r.outputs.push_back(o == kNoValue ? kNone : tensor(g, o));
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
          // The package verifier refuses string tensor attributes, as it does string tensors.
          if (a.t->dtype == DType::String)
            fail(ExitCode::kUnsupported, "node '", n.name, "' (", n.op_type, "): attribute '", key,
                 "' is a string tensor; the runtime does not support string tensors");
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

  // ---- steps: the program in order, before encoding ----
  // A step is a whole-tensor call, a tile kernel, a program-level instruction (whose jump
  // operand holds a label id until encoding) or a label. Reads and writes drive liveness.
  struct Step {
    enum class Kind { kCall, kKernel, kInsn, kLabel } kind = Kind::kCall;
    const Graph* graph = nullptr;
    size_t index = 0;  // kCall: node index in graph; kKernel: group index; kLabel: label id
    rt::Opcode op = rt::Opcode::End;
    std::vector<uint32_t> operands;
    int jump = -1;  // kInsn: operand that is a label id
    std::vector<uint32_t> reads, writes;
  };

  int new_label() { return labels_++; }
  void add_label(int label) {
    Step s;
    s.kind = Step::Kind::kLabel;
    s.index = static_cast<size_t>(label);
    steps_.push_back(std::move(s));
  }
  size_t add_insn(rt::Opcode op, std::vector<uint32_t> operands, int jump,
                  std::vector<uint32_t> reads, std::vector<uint32_t> writes) {
    Step s;
    s.kind = Step::Kind::kInsn;
    s.op = op;
    s.operands = std::move(operands);
    s.jump = jump;
    for (uint32_t t : reads)
      if (t != kNone) s.reads.push_back(t);
    for (uint32_t t : writes)
      if (t != kNone) s.writes.push_back(t);
    steps_.push_back(std::move(s));
    return steps_.size() - 1;
  }

  // Which nodes of `g` must run: those whose outputs reach a graph output or a subgraph
  // capture through what the lowered code reads. A node the passes kept only for a shape
  // operand that the tile forms do not read (the cuvil::SymbolicInts of a Reshape lowered as a
  // copy, of an Expand or a ConstantOfShape) is not emitted.
  std::vector<bool> needed_nodes(const Graph& g, const std::vector<int>& group_of_node) const {
    std::set<ValueId> live = captured(g);
    live.insert(g.outputs.begin(), g.outputs.end());
    std::vector<bool> needed(g.nodes.size(), false);
    for (size_t i = g.nodes.size(); i-- > 0;) {
      const Node& n = g.nodes[i];
      bool any = op_flags(n.op) & kControlFlow;
      for (ValueId o : n.outputs) any = any || (o != kNoValue && live.count(o));
      if (!any) continue;
      needed[i] = true;
      if (group_of_node[i] >= 0) {
        for (ValueId in : kernel_reads(g, groups_[static_cast<size_t>(group_of_node[i])], i)) live.insert(in);
      } else {
        for (ValueId in : n.inputs)
          if (in != kNoValue) live.insert(in);
      }
    }
    return needed;
  }

  // Lowers the nodes of `g` (and, recursively, of its control flow) into steps.
  void lower_graph(const Graph& g) {
    make_graph_tensors(g);
    const std::vector<int> group_of_node = group_nodes(g);
    const std::vector<bool> needed = needed_nodes(g, group_of_node);
    std::set<std::string> not_emitted;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!needed[i]) not_emitted.insert(g.nodes[i].name);
    out_.not_fused.erase(std::remove_if(out_.not_fused.begin(), out_.not_fused.end(),
                                        [&](const LoweredModel::NotFused& f) { return not_emitted.count(f.node) != 0; }),
                         out_.not_fused.end());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      const int gi = group_of_node[i];
      if (!needed[i]) {
        ++out_.skipped_nodes;
        continue;
      }
      if (gi >= 0) {
        if (groups_[gi].nodes.back() != i) continue;
        Step s;
        s.kind = Step::Kind::kKernel;
        s.graph = &g;
        s.index = static_cast<size_t>(gi);
        const Group& grp = groups_[gi];
        std::set<ValueId> internal;
        for (size_t ni : grp.nodes) internal.insert(g.nodes[ni].outputs[0]);
        for (size_t ni : grp.nodes)
          for (ValueId in : kernel_reads(g, grp, ni))
            if (!internal.count(in)) s.reads.push_back(tensor(g, in));
        s.writes.push_back(tensor(g, grp.output));
        steps_.push_back(std::move(s));
        continue;
      }
      if (n.op == OpKind::If) {
        lower_if(g, n);
      } else if (n.op == OpKind::Scan && n.opset < 9) {
        lower_scan8(g, n);
      } else if (n.op == OpKind::Loop || n.op == OpKind::Scan) {
        lower_loop(g, n);
      } else {
        Step s;
        s.kind = Step::Kind::kCall;
        s.graph = &g;
        s.index = i;
        for (ValueId in : n.inputs)
          if (in != kNoValue) s.reads.push_back(tensor(g, in));
        for (ValueId o : n.outputs)
          if (o != kNoValue) s.writes.push_back(tensor(g, o));
        steps_.push_back(std::move(s));
      }
    }
  }

  static const Graph& subgraph(const Node& n, const char* key) {
    const Attribute* a = n.attr(key);
    if (!a || a->kind != Attribute::Kind::Graph || !a->g)
      fail(ExitCode::kInvalidModel, n.op_type, " node '", n.name, "' has no graph attribute '", key, "'");
    return *a->g;
  }

  // If: JumpIfFalse cond, else; <then>; copies; Jump end; else: <else>; copies; end:
  void lower_if(const Graph& g, const Node& n) {
    // Shape inference (infer_if_op) has checked the condition is present, bool, one element.
    CUVIL_ASSERT(n.input(0) != kNoValue, "If node '" << n.name << "' has no condition");
    const uint32_t cond = tensor(g, n.inputs[0]);
    require_one_element(n, cond, "condition");
    const int l_else = new_label(), l_end = new_label();
    add_insn(rt::Opcode::JumpIfFalse, {cond, static_cast<uint32_t>(l_else)}, 1, {cond}, {});
    bool first = true;
    for (const char* key : {"then_branch", "else_branch"}) {
      const Graph& branch = subgraph(n, key);
      if (branch.outputs.size() != n.outputs.size())
        fail(ExitCode::kInvalidModel, "If node '", n.name, "': ", key, " has ", branch.outputs.size(),
             " outputs, the node ", n.outputs.size());
      lower_graph(branch);
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        if (n.outputs[i] == kNoValue) continue;
        const uint32_t dst = tensor(g, n.outputs[i]), src = tensor(branch, branch.outputs[i]);
        check_copy(n, dst, src);
        add_insn(rt::Opcode::Copy, {dst, src}, -1, {src}, {dst});
      }
      if (first) add_insn(rt::Opcode::Jump, {static_cast<uint32_t>(l_end)}, 0, {}, {});
      else add_label(l_end);
      if (first) add_label(l_else);
      first = false;
    }
  }

  // Conditions and trip counts are operands the package verifier accepts only when every dim
  // is the constant 1. Shape inference has refused extents known to differ (exit 3); one still
  // unknown here cannot be proven to be 1.
  void require_one_element(const Node& n, uint32_t t, const char* what) const {
    if (t == kNone) return;
    for (size_t k = 0; k < shapes_[t].size(); ++k) {
      const Dim& d = shapes_[t][k];
      if (!d || d->constant() != 1)
        fail(ExitCode::kUnsupported, n.op_type, " node '", n.name, "': ", what, " '",
             out_.program.tensors[t].name, "' has extent ", d ? d->to_string() : std::string("?"),
             " along axis ", k, "; it must have one element, known at compile time (fix the "
             "dimension with --dim)");
    }
  }

  void check_copy(const Node& n, uint32_t dst, uint32_t src) const {
    const rt::TensorDesc& a = out_.program.tensors[dst];
    const rt::TensorDesc& b = out_.program.tensors[src];
    if (a.dtype != b.dtype || a.dims.size() != b.dims.size())
      fail(ExitCode::kUnsupported, n.op_type, " node '", n.name, "': '", b.name, "' (", dtype_name(b.dtype),
           ", rank ", b.dims.size(), ") does not have the dtype and rank of '", a.name, "' (",
           dtype_name(a.dtype), ", rank ", a.dims.size(), ")");
  }

  // A Scan axis attribute (negative counts from the end) checked against `rank`.
  static uint32_t scan_axis(const Node& n, const char* what, int64_t axis, size_t rank) {
    const int64_t r = static_cast<int64_t>(rank);
    const int64_t a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r)
      fail(ExitCode::kInvalidModel, "Scan node '", n.name, "': scan ", what, " axis ", axis,
           " is out of range for rank ", r);
    return static_cast<uint32_t>(a);
  }

  // Scan-8 runs its body over one batch element at a time: the tensors of that element, which
  // an enclosing loop over the batch axis slices and stacks (lower_scan8).
  struct BatchSlices {
    std::vector<uint32_t> init, sources, finals, stacked;
  };

  // Loop and Scan: LoopInit; head: LoopTest exit; <body>; LoopNext head; exit: LoopExit.
  void lower_loop(const Graph& g, const Node& n, const BatchSlices* batch = nullptr) {
    const Graph& body = subgraph(n, "body");
    const bool scan = n.op == OpKind::Scan;
    rt::LoopDesc d;
    d.kind = scan ? rt::LoopKind::kScan : rt::LoopKind::kLoop;
    d.name = batch ? n.name + ".sequence" : n.name;
    auto in_tensor = [&](size_t i) { return n.input(i) == kNoValue ? kNone : tensor(g, n.inputs[i]); };
    auto out_tensor = [&](size_t i) {
      return i < n.outputs.size() && n.outputs[i] != kNoValue ? tensor(g, n.outputs[i]) : kNone;
    };
    const size_t n_scan_in = scan ? static_cast<size_t>(n.attr_int("num_scan_inputs", 0)) : 0;
    const size_t first_state = batch ? 1 : scan ? 0 : 2;  // Scan-8: sequence_lens first
    if (n.inputs.size() < first_state + n_scan_in)
      fail(ExitCode::kInvalidModel, n.op_type, " node '", n.name, "' has too few inputs");
    const size_t n_state = n.inputs.size() - first_state - n_scan_in;
    const size_t body_first_state = scan ? 0 : 2;  // Loop body inputs: iter_num, cond, state...
    const size_t body_first_out = scan ? 0 : 1;    // Loop body outputs: cond, state..., scan...
    if (body.inputs.size() != body_first_state + n_state + n_scan_in ||
        body.outputs.size() < body_first_out + n_state)
      fail(ExitCode::kInvalidModel, n.op_type, " node '", n.name, "': body has ", body.inputs.size(),
           " inputs and ", body.outputs.size(), " outputs, which does not match the node's ",
           n.inputs.size(), " inputs");
    const size_t n_scan_out = body.outputs.size() - body_first_out - n_state;

    d.counter = add_tensor(n.name + ".iteration", DType::Int64, rt::TensorKind::kIntermediate, {});
    if (!scan) {
      d.max_trips = in_tensor(0);
      require_one_element(n, d.max_trips, "trip count");
      d.cond_init = in_tensor(1);
      require_one_element(n, d.cond_init, "condition");
      d.cond = add_tensor(n.name + ".condition", DType::Bool, rt::TensorKind::kIntermediate, {});
      tensor_of_[{&body, body.inputs[0]}] = d.counter;
      tensor_of_[{&body, body.inputs[1]}] = d.cond;
    }
    for (size_t i = 0; i < n_state; ++i) {
      const Value& v = body.value(body.inputs[body_first_state + i]);
      const uint32_t t = add_tensor(v, rt::TensorKind::kIntermediate, complete_shape(v));
      tensor_of_[{&body, body.inputs[body_first_state + i]}] = t;
      d.init.push_back(batch ? batch->init[i] : tensor(g, n.inputs[first_state + i]));
      d.state.push_back(t);
      d.final.push_back(batch ? batch->finals[i] : out_tensor(i));
      check_copy(n, t, d.init.back());
    }
    const uint32_t li = static_cast<uint32_t>(out_.program.loops.size());
    out_.program.loops.emplace_back();
    loop_stack_.push_back(li);
    const auto attr_or = [&](const char* key, size_t count, int64_t fallback) {
      std::vector<int64_t> v = n.attr_ints(key).value_or(std::vector<int64_t>{});
      if (v.empty()) v.assign(count, fallback);
      if (v.size() != count)
        fail(ExitCode::kInvalidModel, "Scan node '", n.name, "': attribute '", key, "' has ", v.size(),
             " entries, expected ", count);
      return v;
    };
    if (scan) {
      const auto axes = batch ? std::vector<int64_t>(n_scan_in, 0) : attr_or("scan_input_axes", n_scan_in, 0);
      const auto dirs = attr_or(batch ? "directions" : "scan_input_directions", n_scan_in, 0);
      for (size_t j = 0; j < n_scan_in; ++j) {
        const Value& v = body.value(body.inputs[n_state + j]);
        rt::LoopScanInput in;
        in.source = batch ? batch->sources[j] : tensor(g, n.inputs[first_state + n_state + j]);
        in.slice = add_tensor(v, rt::TensorKind::kIntermediate, complete_shape(v));
        tensor_of_[{&body, body.inputs[n_state + j]}] = in.slice;
        in.axis = scan_axis(n, "input", axes[j], out_.program.tensors[in.source].dims.size());
        in.reverse = dirs[j] != 0;
        d.scan_inputs.push_back(in);
      }
    }
    const int head = new_label(), exit = new_label();
    std::vector<uint32_t> init_reads = d.init, init_writes = d.state;
    init_reads.insert(init_reads.end(), {d.max_trips, d.cond_init});
    init_writes.insert(init_writes.end(), {d.counter, d.cond});
    add_insn(rt::Opcode::LoopInit, {li}, -1, init_reads, init_writes);
    add_label(head);
    std::vector<uint32_t> test_reads = {d.counter, d.max_trips, d.cond}, test_writes;
    for (const auto& in : d.scan_inputs) {
      test_reads.push_back(in.source);
      test_writes.push_back(in.slice);
    }
    const size_t begin = add_insn(rt::Opcode::LoopTest, {li, static_cast<uint32_t>(exit)}, 1, test_reads, test_writes);

    lower_graph(body);

    if (!scan) {
      d.cond_next = tensor(body, body.outputs[0]);
      require_one_element(n, d.cond_next, "body condition");
    }
    for (size_t i = 0; i < n_state; ++i) {
      d.next.push_back(tensor(body, body.outputs[body_first_out + i]));
      check_copy(n, d.state[i], d.next.back());
    }
    const size_t n_attr = scan && !batch ? n_scan_out : 0;  // Scan-8 stacks along axis 0
    auto out_axes = attr_or("scan_output_axes", n_attr, 0);
    auto out_dirs = attr_or("scan_output_directions", n_attr, 0);
    out_axes.resize(n_scan_out, 0);
    out_dirs.resize(n_scan_out, 0);
    for (size_t k = 0; k < n_scan_out; ++k) {
      rt::LoopScanOutput o;
      o.body = tensor(body, body.outputs[body_first_out + n_state + k]);
      o.stacked = !batch ? out_tensor(n_state + k) : k < batch->stacked.size() ? batch->stacked[k] : kNone;
      if (scan) {
        o.axis = scan_axis(n, "output", out_axes[k], out_.program.tensors[o.body].dims.size() + 1);
        o.reverse = out_dirs[k] != 0;
      }
      if (o.stacked != kNone) {
        const rt::TensorDesc& a = out_.program.tensors[o.stacked];
        const rt::TensorDesc& b = out_.program.tensors[o.body];
        if (a.dtype != b.dtype || a.dims.size() != b.dims.size() + 1)
          fail(ExitCode::kUnsupported, n.op_type, " node '", n.name, "': scan output '", a.name,
               "' does not have the dtype and rank of '", b.name, "' plus one axis");
      }
      d.scan_outputs.push_back(o);
    }
    std::vector<uint32_t> next_reads = d.next, next_writes = d.state;
    next_reads.insert(next_reads.end(), {d.counter, d.cond_next});
    for (const auto& o : d.scan_outputs) next_reads.push_back(o.body);
    next_writes.insert(next_writes.end(), {d.counter, d.cond});
    const size_t end = add_insn(rt::Opcode::LoopNext, {li, static_cast<uint32_t>(head)}, 1, next_reads, next_writes);
    loop_stack_.pop_back();
    loop_ranges_.emplace_back(begin, end);
    add_label(exit);
    std::vector<uint32_t> exit_writes = d.final;
    for (const auto& o : d.scan_outputs) exit_writes.push_back(o.stacked);
    add_insn(rt::Opcode::LoopExit, {li}, -1, d.state, exit_writes);
    out_.program.loops[li] = std::move(d);
  }

  // Scan-8 (opset 8): inputs and outputs have a leading batch axis, and the body runs over the
  // sequence of each batch element. Lowered as an outer loop over the batch (slicing the
  // initial states and scan inputs along axis 0, stacking the results along axis 0) around the
  // Scan of one element. Variable sequence lengths are not supported.
  void lower_scan8(const Graph& g, const Node& n) {
    if (n.input(0) != kNoValue)
      fail(ExitCode::kUnsupported, "Scan node '", n.name, "' (opset ", n.opset,
           "): sequence_lens is not supported; omit it so that every sequence has the full length");
    const size_t n_scan_in = static_cast<size_t>(n.attr_int("num_scan_inputs", 0));
    if (n.inputs.size() < 1 + n_scan_in)
      fail(ExitCode::kInvalidModel, "Scan node '", n.name, "' has too few inputs");
    const size_t n_state = n.inputs.size() - 1 - n_scan_in;
    if (n.outputs.size() < n_state)
      fail(ExitCode::kInvalidModel, "Scan node '", n.name, "' has fewer outputs than states");
    rt::LoopDesc d;
    d.kind = rt::LoopKind::kScan;
    d.name = n.name + ".batch";
    d.counter = add_tensor(d.name + ".iteration", DType::Int64, rt::TensorKind::kIntermediate, {});
    const uint32_t li = static_cast<uint32_t>(out_.program.loops.size());
    out_.program.loops.emplace_back();
    loop_stack_.push_back(li);
    // One batch element of tensor t: its dims without the leading batch axis.
    auto element = [&](uint32_t t, const std::string& name) {
      const rt::TensorDesc& desc = out_.program.tensors[t];
      if (desc.dims.empty())
        fail(ExitCode::kInvalidModel, "Scan node '", n.name, "': '", desc.name, "' has no batch axis");
      const Shape tail(shapes_[t].begin() + 1, shapes_[t].end());
      return add_tensor(name, desc.dtype, rt::TensorKind::kIntermediate, tail);
    };
    BatchSlices b;
    std::vector<uint32_t> test_reads = {d.counter}, test_writes, next_reads = {d.counter}, exit_writes;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      const uint32_t src = tensor(g, n.inputs[i]);
      const uint32_t slice = element(src, out_.program.tensors[src].name + ".element");
      d.scan_inputs.push_back({src, slice, 0, 0});
      (i <= n_state ? b.init : b.sources).push_back(slice);
      test_reads.push_back(src);
      test_writes.push_back(slice);
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      uint32_t per = kNone;
      if (n.outputs[o] != kNoValue) {
        const uint32_t out = tensor(g, n.outputs[o]);
        per = element(out, out_.program.tensors[out].name + ".element");
        d.scan_outputs.push_back({per, out, 0, 0});
        next_reads.push_back(per);
        exit_writes.push_back(out);
      }
      (o < n_state ? b.finals : b.stacked).push_back(per);
    }
    const int head = new_label(), exit = new_label();
    add_insn(rt::Opcode::LoopInit, {li}, -1, {}, {d.counter});
    add_label(head);
    const size_t begin = add_insn(rt::Opcode::LoopTest, {li, static_cast<uint32_t>(exit)}, 1, test_reads, test_writes);
    lower_loop(g, n, &b);
    const size_t end = add_insn(rt::Opcode::LoopNext, {li, static_cast<uint32_t>(head)}, 1, next_reads, {d.counter});
    loop_stack_.pop_back();
    loop_ranges_.emplace_back(begin, end);
    add_label(exit);
    add_insn(rt::Opcode::LoopExit, {li}, -1, {}, exit_writes);
    out_.program.loops[li] = std::move(d);
  }

  // Data-dependent symbols in a tensor's dims.
  std::set<uint32_t> data_dependent_symbols(uint32_t t) {
    std::set<uint32_t> out;
    for (const Dim& d : shapes_[t])
      for (const auto& name : d->symbols())
        if (!input_symbols_.count(name)) out.insert(symbol_index(name));
    return out;
  }

  // A loop's per-iteration facts: the tensors made for its body (and nested bodies), and the
  // data-dependent symbols that only those and its state tensors mention.
  void fill_loop_scopes() {
    for (uint32_t li = 0; li < out_.program.loops.size(); ++li) {
      rt::LoopDesc& d = out_.program.loops[li];
      std::set<uint32_t> inside, state(d.state.begin(), d.state.end());
      for (uint32_t t = 0; t < tensor_loops_.size(); ++t)
        for (uint32_t l : tensor_loops_[t])
          if (l == li && out_.program.tensors[t].kind != rt::TensorKind::kWeight) inside.insert(t);
      std::set<uint32_t> in_syms, out_syms;
      for (uint32_t t = 0; t < shapes_.size(); ++t) {
        auto syms = data_dependent_symbols(t);
        (inside.count(t) || state.count(t) ? in_syms : out_syms).insert(syms.begin(), syms.end());
      }
      for (uint32_t s : in_syms)
        if (!out_syms.count(s)) d.symbols.push_back(s);
      d.tensors.assign(inside.begin(), inside.end());
    }
  }

  // ---- memory plan and code ----
  void plan_and_emit() {
    // Liveness over the linear order of steps. Jumps forward (If) only skip steps, so linear
    // intervals are safe; a tensor used inside a loop stays live for the whole loop.
    std::map<uint32_t, std::pair<int, int>> life;  // tensor -> (first, last step)
    for (size_t s = 0; s < steps_.size(); ++s) {
      const int si = static_cast<int>(s);
      for (const auto* list : {&steps_[s].writes, &steps_[s].reads})
        for (uint32_t t : *list) {
          auto [it, added] = life.emplace(t, std::make_pair(si, si));
          if (!added) {
            it->second.first = std::min(it->second.first, si);
            it->second.second = std::max(it->second.second, si);
          }
        }
    }
    for (const auto& [a, b] : loop_ranges_)
      for (auto& [t, l] : life)
        if (l.first <= static_cast<int>(b) && l.second >= static_cast<int>(a)) {
          l.first = std::min(l.first, static_cast<int>(a));
          l.second = std::max(l.second, static_cast<int>(b));
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
    std::vector<uint32_t> label_at(static_cast<size_t>(labels_), kNone);
    std::vector<std::pair<size_t, int>> fixups;  // code word -> label
    for (const Step& s : steps_) {
      switch (s.kind) {
        case Step::Kind::kKernel: {
          uint32_t k = emit_kernel(groups_[s.index]);
          std::vector<std::string> names;
          for (size_t ni : groups_[s.index].nodes) names.push_back(groups_[s.index].graph->nodes[ni].name);
          out_.kernel_nodes.push_back(std::move(names));
          code.insert(code.end(), {static_cast<uint32_t>(rt::Opcode::RunKernel), k});
          out_.fused_kernels++;
          out_.fused_nodes += static_cast<int>(groups_[s.index].nodes.size());
          break;
        }
        case Step::Kind::kCall:
          out_.program.nodes.push_back(node_record(*s.graph, s.graph->nodes[s.index]));
          code.insert(code.end(), {static_cast<uint32_t>(rt::Opcode::CallOp),
                                   static_cast<uint32_t>(out_.program.nodes.size() - 1)});
          out_.call_ops++;
          break;
        case Step::Kind::kInsn:
          code.push_back(static_cast<uint32_t>(s.op));
          for (size_t i = 0; i < s.operands.size(); ++i) {
            if (static_cast<int>(i) == s.jump) fixups.emplace_back(code.size(), static_cast<int>(s.operands[i]));
            code.push_back(s.operands[i]);
          }
          break;
        case Step::Kind::kLabel: label_at[s.index] = static_cast<uint32_t>(code.size()); break;
      }
    }
    for (const auto& [dst, src] : output_copies_)
      code.insert(code.end(), {static_cast<uint32_t>(rt::Opcode::Copy), dst, src});
    code.push_back(static_cast<uint32_t>(rt::Opcode::End));
    for (const auto& [word, label] : fixups) {
      CUVIL_ASSERT(label_at[static_cast<size_t>(label)] != kNone, "label " << label << " was never placed");
      code[word] = label_at[static_cast<size_t>(label)];
    }
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
  std::map<std::pair<const Graph*, ValueId>, uint32_t> tensor_of_;
  std::vector<Shape> shapes_;                       // per tensor, every dim known
  std::vector<std::vector<uint32_t>> tensor_loops_;  // per tensor, the loops it is made inside
  std::vector<uint32_t> loop_stack_;
  std::vector<std::pair<size_t, size_t>> loop_ranges_;  // step range [LoopTest, LoopNext]
  std::vector<std::pair<uint32_t, uint32_t>> output_copies_;
  std::vector<Group> groups_;
  std::vector<Step> steps_;
  int labels_ = 0;
};

}  // namespace

namespace {

// The model's inputs and outputs cross the C API as dense tensors of the dtypes the runtime
// has kernels for; anything else would give a package its own loader refuses (strings) or an
// input no caller can bind.
void check_model_io(const Model& model) {
  const Graph& g = *model.graph;
  auto check = [&](ValueId id, const char* what) {
    const Value& v = g.value(id);
    if (v.kind != ValueKind::Tensor)
      fail(ExitCode::kUnsupported, what, " '", v.name, "' is not a tensor (kind ",
           value_kind_name(v.kind), "); cuvil compiles models whose inputs and outputs are tensors");
    switch (v.dtype) {
      case DType::String:
        fail(ExitCode::kUnsupported, what, " '", v.name,
             "' has dtype str: string tensors are not supported by the runtime");
      case DType::Complex64:
      case DType::Complex128:
        fail(ExitCode::kUnsupported, what, " '", v.name, "' has dtype ", dtype_name(v.dtype),
             ": complex tensors are not supported by the runtime");
      case DType::Undefined:
        fail(ExitCode::kUnsupported, what, " '", v.name,
             "' has no known element type (shape inference could not derive it)");
      default:
        break;
    }
  };
  for (ValueId id : g.inputs) check(id, "graph input");
  for (ValueId id : g.outputs) check(id, "graph output");
}

}  // namespace

LoweredModel lower_model(const Model& model, const LowerOptions& options) {
  check_model_io(model);
  return Lowerer(model, options).run();
}

std::vector<uint8_t> gather_weights(const LoweredModel& lowered) {
  std::vector<uint8_t> out(lowered.weights_size, 0);
  for (const WeightPiece& p : lowered.weight_pieces)
    if (!p.data->bytes.empty()) std::memcpy(out.data() + p.offset, p.data->bytes.data(), p.data->bytes.size());
  return out;
}

}  // namespace cuvil::codegen
