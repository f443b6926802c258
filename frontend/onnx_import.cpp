#include "frontend/onnx_import.h"

#include <fcntl.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <cerrno>
#include <cstring>
#include <map>
#include <queue>
#include <set>

#include "frontend/tensor_proto.h"
#include "support/checked.h"
#include "support/error.h"

namespace cuvil::frontend {
namespace {

using OpsetMap = std::map<std::string, int64_t>;

std::string normalize_domain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

// A node waiting to be imported: the proto (copied when a function was inlined) and the
// opsets it was written against (the model's, or an inlined function's own).
struct PendingNode {
  onnx::NodeProto proto;
  const OpsetMap* opsets;
};

std::string sanitize_symbol(std::string s) {
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "d_" + s;
  return s;
}

class Importer {
 public:
  Importer(const std::string& model_dir, const ImportOptions& options, const std::string& display)
      : model_dir_(model_dir), options_(options), display_(display) {}

  Model run(const onnx::ModelProto& proto) {
    Model m;
    model_ = &m;
    m.ir_version = proto.ir_version();
    m.producer_name = proto.producer_name();
    m.producer_version = proto.producer_version();
    m.domain = proto.domain();
    m.doc_string = proto.doc_string();
    if (!proto.has_ir_version() || m.ir_version <= 0)
      fail(ExitCode::kInvalidModel, display_, ": model has no ir_version (is this an ONNX file?)");
    if (m.ir_version > kMaxIrVersion)
      fail(ExitCode::kUnsupported, display_, ": ir_version ", m.ir_version,
           " is newer than the newest cuvil supports (", kMaxIrVersion, ")");
    for (const auto& imp : proto.opset_import()) {
      std::string d = normalize_domain(imp.domain());
      if (imp.version() < 1)
        fail(ExitCode::kInvalidModel, display_, ": opset_import for domain '", d,
             "' has version ", imp.version());
      m.opset_imports[d] = imp.version();
    }
    if (proto.opset_import_size() == 0) m.opset_imports[""] = 1;  // pre-opset_import models
    auto def = m.opset_imports.find("");
    if (def != m.opset_imports.end() && def->second > kMaxDefaultOpset)
      fail(ExitCode::kUnsupported, display_, ": opset ", def->second,
           " of the default domain is newer than the newest cuvil supports (", kMaxDefaultOpset, ")");
    model_opsets_ = m.opset_imports;

    for (const auto& f : proto.functions()) {
      std::string key = normalize_domain(f.domain()) + "::" + f.name();
      functions_[key] = &f;
      m.local_functions.push_back(key);
      OpsetMap fo;
      for (const auto& imp : f.opset_import()) fo[normalize_domain(imp.domain())] = imp.version();
      if (fo.empty()) fo = model_opsets_;
      function_opsets_[key] = fo;
    }
    if (!proto.has_graph()) fail(ExitCode::kInvalidModel, display_, ": model has no graph");
    m.graph = import_graph(proto.graph(), nullptr, 0);
    apply_dim_options(m);
    return m;
  }

 private:
  // ---- function inlining ----
  // `call_site` names the top-level node being expanded ("node 'x' (domain::Op)"), for messages.
  void expand(const onnx::NodeProto& node, const OpsetMap* opsets, int depth,
              std::vector<PendingNode>& out, const std::string& call_site) {
    if (depth > 0 && ++inlined_nodes_ > kMaxInlinedNodes)
      fail(ExitCode::kInvalidModel, call_site,
           ": inlining model-local functions would create more than ", kMaxInlinedNodes,
           " nodes");
    std::string key = normalize_domain(node.domain()) + "::" + node.op_type();
    auto fit = functions_.find(key);
    bool builtin = op_from_name(node.domain(), node.op_type()).has_value();
    if (fit == functions_.end() || (builtin && normalize_domain(node.domain()).empty())) {
      out.push_back({node, opsets});
      return;
    }
    if (depth > kMaxSubgraphDepth)
      fail(ExitCode::kInvalidModel, call_site, ": function '", key, "' is inlined more than ",
           kMaxSubgraphDepth, " levels deep (recursive functions?)");
    const onnx::FunctionProto& f = *fit->second;
    const std::string prefix = "__" + (node.name().empty() ? f.name() : node.name()) + "_" +
                               std::to_string(inline_counter_++) + "/";
    std::map<std::string, std::string> rename;
    for (int i = 0; i < f.input_size(); ++i)
      rename[f.input(i)] = i < node.input_size() ? node.input(i) : "";
    for (int i = 0; i < f.output_size(); ++i)
      rename[f.output(i)] = i < node.output_size() ? node.output(i) : "";
    auto mapped = [&](const std::string& n) -> std::string {
      if (n.empty()) return n;
      auto it = rename.find(n);
      return it != rename.end() ? it->second : prefix + n;
    };
    std::map<std::string, const onnx::AttributeProto*> actual;
    for (const auto& a : node.attribute()) actual[a.name()] = &a;
    // Attribute defaults (FunctionProto.attribute_proto) arrived after ONNX 1.12, whose
    // protos we build against: an unset referenced attribute is simply left unset.
    const OpsetMap* fopsets = &function_opsets_.at(key);
    for (const auto& inner : f.node()) {
      onnx::NodeProto copy = inner;
      for (auto& in : *copy.mutable_input()) in = mapped(in);
      for (auto& o : *copy.mutable_output()) o = mapped(o);
      if (!copy.name().empty()) copy.set_name(prefix + copy.name());
      bind_attributes(copy, actual, mapped, {});
      expand(copy, fopsets, depth + 1, out, call_site);
    }
  }

  // Rewrites the attributes of a node copied out of a function body: references
  // (ref_attr_name) take the caller's value or are dropped when the caller leaves them unset,
  // and the body's own subgraphs have their references to function-scope names renamed like
  // the body's nodes (names a subgraph defines itself, `local`, are kept). Subgraphs that come
  // from the caller through a reference belong to the caller's scope and are not renamed.
  static void bind_attributes(onnx::NodeProto& node,
                              const std::map<std::string, const onnx::AttributeProto*>& actual,
                              const std::function<std::string(const std::string&)>& mapped,
                              const std::set<std::string>& local) {
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
    attrs.Swap(node.mutable_attribute());
    for (auto& a : attrs) {
      if (!a.ref_attr_name().empty()) {
        auto it = actual.find(a.ref_attr_name());
        if (it == actual.end()) continue;  // unset optional attribute
        onnx::AttributeProto* na = node.add_attribute();
        *na = *it->second;
        na->set_name(a.name());
        continue;
      }
      onnx::AttributeProto* na = node.add_attribute();
      na->Swap(&a);
      if (na->has_g()) rename_scope_refs(*na->mutable_g(), actual, mapped, local);
      for (auto& sg : *na->mutable_graphs()) rename_scope_refs(sg, actual, mapped, local);
    }
  }

  static void rename_scope_refs(onnx::GraphProto& g,
                                const std::map<std::string, const onnx::AttributeProto*>& actual,
                                const std::function<std::string(const std::string&)>& mapped,
                                std::set<std::string> local) {
    for (const auto& i : g.input()) local.insert(i.name());
    for (const auto& t : g.initializer()) local.insert(t.name());
    for (const auto& n : g.node())
      for (const auto& o : n.output()) local.insert(o);
    auto rename = [&](std::string& name) {
      if (!name.empty() && !local.count(name)) name = mapped(name);
    };
    for (auto& n : *g.mutable_node()) {
      for (auto& in : *n.mutable_input()) rename(in);
      bind_attributes(n, actual, mapped, local);
    }
    for (auto& o : *g.mutable_output()) rename(*o.mutable_name());
  }

  // Names a subgraph reads from enclosing scopes (for ordering the outer graph).
  static void outer_refs(const onnx::GraphProto& g, std::set<std::string>& refs) {
    std::set<std::string> defined;
    for (const auto& i : g.input()) defined.insert(i.name());
    for (const auto& t : g.initializer()) defined.insert(t.name());
    for (const auto& n : g.node()) {
      for (const auto& in : n.input())
        if (!in.empty() && !defined.count(in)) refs.insert(in);
      for (const auto& a : n.attribute()) {
        std::set<std::string> inner;
        if (a.has_g()) outer_refs(a.g(), inner);
        for (const auto& sg : a.graphs()) outer_refs(sg, inner);
        for (const auto& r : inner)
          if (!defined.count(r)) refs.insert(r);
      }
      for (const auto& o : n.output()) defined.insert(o);
    }
    for (const auto& o : g.output())
      if (!defined.count(o.name())) refs.insert(o.name());
  }

  // Stable topological order (original order among ready nodes); a cycle is an error.
  std::vector<size_t> topo_order(const std::vector<PendingNode>& nodes, const std::string& gname) {
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < nodes.size(); ++i)
      for (const auto& o : nodes[i].proto.output())
        if (!o.empty()) producer.emplace(o, i);
    std::vector<std::vector<size_t>> users(nodes.size());
    std::vector<int> pending(nodes.size(), 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::set<std::string> reads(nodes[i].proto.input().begin(), nodes[i].proto.input().end());
      for (const auto& a : nodes[i].proto.attribute()) {
        if (a.has_g()) outer_refs(a.g(), reads);
        for (const auto& sg : a.graphs()) outer_refs(sg, reads);
      }
      std::set<size_t> deps;
      for (const auto& r : reads) {
        auto it = producer.find(r);
        if (it != producer.end() && it->second != i) deps.insert(it->second);
        if (it != producer.end() && it->second == i)
          fail(ExitCode::kInvalidModel, "graph '", gname, "': node '", node_label(nodes[i].proto, i),
               "' reads its own output '", r, "' (cycle)");
      }
      for (size_t d : deps) users[d].push_back(i);
      pending[i] = static_cast<int>(deps.size());
    }
    std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] == 0) ready.push(i);
    std::vector<size_t> order;
    while (!ready.empty()) {
      size_t i = ready.top();
      ready.pop();
      order.push_back(i);
      for (size_t u : users[i])
        if (--pending[u] == 0) ready.push(u);
    }
    if (order.size() != nodes.size()) {
      std::string names;
      int listed = 0;
      for (size_t i = 0; i < nodes.size() && listed < 8; ++i)
        if (pending[i] > 0) {
          names += (listed++ ? ", '" : "'") + node_label(nodes[i].proto, i) + "'";
        }
      fail(ExitCode::kInvalidModel, "graph '", gname, "' has a cycle through nodes ", names);
    }
    return order;
  }

  static std::string node_domain_op(const onnx::NodeProto& n) {
    std::string d = normalize_domain(n.domain());
    return d.empty() ? n.op_type() : d + "::" + n.op_type();
  }

  static std::string node_label(const onnx::NodeProto& n, size_t index) {
    return n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
  }

  // ---- values ----
  ValueId resolve(Graph& g, const std::string& name) {
    ValueId id = g.find(name);
    if (id != kNoValue) return id;
    if (!g.parent) return kNoValue;
    ValueId outer = resolve(*g.parent, name);
    if (outer == kNoValue) return kNoValue;
    id = g.add_value(name);
    g.value(id).outer = outer;
    g.captures.push_back(id);
    return id;
  }

  void import_type(const onnx::TypeProto& type, Value& v, const std::string& what, bool required) {
    switch (type.value_case()) {
      case onnx::TypeProto::kTensorType: {
        v.kind = ValueKind::Tensor;
        const auto& tt = type.tensor_type();
        if (tt.elem_type() != 0) {
          auto dt = dtype_from_onnx(tt.elem_type());
          if (!dt) fail(ExitCode::kInvalidModel, what, " '", v.name, "' has unknown elem_type ", tt.elem_type());
          v.dtype = *dt;
        } else if (required) {
          fail(ExitCode::kInvalidModel, what, " '", v.name, "' has no element type");
        }
        if (tt.has_shape()) {
          Shape s;
          for (int k = 0; k < tt.shape().dim_size(); ++k) {
            const auto& d = tt.shape().dim(k);
            if (d.has_dim_value()) {
              if (d.dim_value() < 0)
                fail(ExitCode::kInvalidModel, what, " '", v.name, "' has negative dimension ",
                     d.dim_value(), " at axis ", k);
              s.emplace_back(DimExpr(d.dim_value()));
            } else if (d.has_dim_param() && !d.dim_param().empty()) {
              s.emplace_back(DimExpr::symbol(d.dim_param()));
              symbols_.insert(d.dim_param());
            } else {
              std::string fresh = sanitize_symbol(v.name) + "_dim" + std::to_string(k);
              while (symbols_.count(fresh)) fresh += "_";
              symbols_.insert(fresh);
              s.emplace_back(DimExpr::symbol(fresh));
            }
          }
          v.shape = std::move(s);
        }
        return;
      }
      case onnx::TypeProto::kSequenceType:
        v.kind = ValueKind::Sequence;
        if (type.sequence_type().elem_type().has_tensor_type()) {
          auto dt = dtype_from_onnx(type.sequence_type().elem_type().tensor_type().elem_type());
          if (dt) v.dtype = *dt;
        }
        return;
      case onnx::TypeProto::kOptionalType:
        v.kind = ValueKind::Optional;
        if (type.optional_type().elem_type().has_tensor_type()) {
          Value inner;
          inner.name = v.name;
          import_type(type.optional_type().elem_type(), inner, what, false);
          v.dtype = inner.dtype;
          v.shape = inner.shape;
        }
        return;
      case onnx::TypeProto::kMapType: v.kind = ValueKind::Map; return;
      case onnx::TypeProto::kSparseTensorType: v.kind = ValueKind::SparseTensor; return;
      default:
        if (required) fail(ExitCode::kInvalidModel, what, " '", v.name, "' has no type");
        v.kind = ValueKind::Tensor;
    }
  }

  // ---- attributes ----
  Attribute import_attribute(const onnx::AttributeProto& a, Graph& owner, int depth,
                             const std::string& node_name) {
    Attribute r;
    using K = Attribute::Kind;
    auto type = a.type();
    if (type == onnx::AttributeProto::UNDEFINED) {  // very old models: infer from the field set
      if (a.has_f()) type = onnx::AttributeProto::FLOAT;
      else if (a.has_i()) type = onnx::AttributeProto::INT;
      else if (a.has_s()) type = onnx::AttributeProto::STRING;
      else if (a.has_t()) type = onnx::AttributeProto::TENSOR;
      else if (a.has_g()) type = onnx::AttributeProto::GRAPH;
      else if (a.floats_size()) type = onnx::AttributeProto::FLOATS;
      else if (a.ints_size()) type = onnx::AttributeProto::INTS;
      else if (a.strings_size()) type = onnx::AttributeProto::STRINGS;
      else if (a.tensors_size()) type = onnx::AttributeProto::TENSORS;
      else if (a.graphs_size()) type = onnx::AttributeProto::GRAPHS;
      else type = onnx::AttributeProto::INTS;  // an empty list
    }
    const std::string ctx = "node '" + node_name + "' attribute '" + a.name() + "'";
    switch (type) {
      case onnx::AttributeProto::FLOAT: r.kind = K::Float; r.f = a.f(); break;
      case onnx::AttributeProto::INT: r.kind = K::Int; r.i = a.i(); break;
      case onnx::AttributeProto::STRING: r.kind = K::String; r.s = a.s(); break;
      case onnx::AttributeProto::TENSOR:
        r.kind = K::Tensor;
        r.t = import_tensor(a.t(), model_dir_, ctx);
        break;
      case onnx::AttributeProto::GRAPH:
        r.kind = K::Graph;
        r.g = import_graph(a.g(), &owner, depth + 1);
        break;
      case onnx::AttributeProto::SPARSE_TENSOR:
        r.kind = K::SparseTensor;
        r.strings.push_back(a.sparse_tensor().ShortDebugString());
        break;
      case onnx::AttributeProto::TYPE_PROTO:
        r.kind = K::TypeProto;
        r.strings.push_back(a.tp().ShortDebugString());
        break;
      case onnx::AttributeProto::FLOATS:
        r.kind = K::Floats;
        r.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case onnx::AttributeProto::INTS:
        r.kind = K::Ints;
        r.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto::STRINGS:
        r.kind = K::Strings;
        r.strings.assign(a.strings().begin(), a.strings().end());
        break;
      case onnx::AttributeProto::TENSORS:
        r.kind = K::Tensors;
        for (const auto& t : a.tensors()) r.tensors.push_back(import_tensor(t, model_dir_, ctx));
        break;
      case onnx::AttributeProto::GRAPHS:
        r.kind = K::Graphs;
        for (const auto& g : a.graphs()) r.graphs.push_back(import_graph(g, &owner, depth + 1));
        break;
      case onnx::AttributeProto::SPARSE_TENSORS:
        r.kind = K::SparseTensors;
        for (const auto& s : a.sparse_tensors()) r.strings.push_back(s.ShortDebugString());
        break;
      case onnx::AttributeProto::TYPE_PROTOS:
        r.kind = K::TypeProtos;
        for (const auto& t : a.type_protos()) r.strings.push_back(t.ShortDebugString());
        break;
      default:
        fail(ExitCode::kInvalidModel, ctx, " has unknown type ", static_cast<int>(a.type()));
    }
    return r;
  }

  // ---- graphs ----
  std::shared_ptr<Graph> import_graph(const onnx::GraphProto& gp, Graph* parent, int depth) {
    if (depth > kMaxSubgraphDepth)
      fail(ExitCode::kInvalidModel, "subgraph '", gp.name(), "' is nested more than ",
           kMaxSubgraphDepth, " levels deep");
    auto g = std::make_shared<Graph>();
    g->name = gp.name().empty() ? (parent ? "subgraph" : "main") : gp.name();
    g->parent = parent;
    const bool top = parent == nullptr;

    std::set<std::string> initializer_names;
    for (const auto& t : gp.initializer()) {
      if (t.name().empty())
        fail(ExitCode::kInvalidModel, "graph '", g->name, "' has an initializer without a name");
      if (!initializer_names.insert(t.name()).second)
        fail(ExitCode::kInvalidModel, "graph '", g->name, "': initializer '", t.name(),
             "' is defined twice");
      ValueId id = g->add_value(t.name());
      Value& v = g->value(id);
      v.data = import_tensor(t, model_dir_, "initializer");
      v.dtype = v.data->dtype;
      v.is_initializer = true;
      Shape s;
      for (int64_t d : v.data->dims) s.emplace_back(DimExpr(d));
      v.shape = std::move(s);
    }
    if (gp.sparse_initializer_size() > 0)
      fail(ExitCode::kUnsupported, "graph '", g->name, "': sparse initializers ('",
           gp.sparse_initializer(0).values().name(), "') are not supported");

    for (const auto& in : gp.input()) {
      if (in.name().empty())
        fail(ExitCode::kInvalidModel, "graph '", g->name, "' has an input without a name");
      if (initializer_names.count(in.name())) continue;  // old-style input with a default
      if (g->find(in.name()) != kNoValue)
        fail(ExitCode::kInvalidModel, "graph '", g->name, "': input '", in.name(), "' is listed twice");
      ValueId id = g->add_value(in.name());
      import_type(in.type(), g->value(id), "graph input", top);
      g->inputs.push_back(id);
    }

    std::vector<PendingNode> pending;
    for (int i = 0; i < gp.node_size(); ++i) {
      const onnx::NodeProto& n = gp.node(i);
      expand(n, &model_opsets_, 0, pending,
             "node '" + node_label(n, static_cast<size_t>(i)) + "' (" + node_domain_op(n) + ")");
    }
    std::vector<size_t> order = topo_order(pending, g->name);

    for (size_t idx : order) {
      const onnx::NodeProto& np = pending[idx].proto;
      Node node;
      node.op_type = np.op_type();
      node.domain = normalize_domain(np.domain());
      node.name = node_label(np, idx);
      auto kind = op_from_name(node.domain, node.op_type);
      node.op = kind.value_or(OpKind::Unknown);
      auto os = pending[idx].opsets->find(node.domain);
      if (os != pending[idx].opsets->end()) {
        node.opset = static_cast<int>(os->second);
      } else if (node.domain.empty()) {
        fail(ExitCode::kInvalidModel, "node '", node.name, "' (", node.op_type,
             "): the model imports no opset for the default domain");
      }
      for (const auto& in : np.input()) {
        if (in.empty()) {
          node.inputs.push_back(kNoValue);
          continue;
        }
        ValueId id = resolve(*g, in);
        if (id == kNoValue)
          fail(ExitCode::kInvalidModel, "node '", node.name, "' (", node.op_type,
               ") reads undefined value '", in, "'");
        node.inputs.push_back(id);
      }
      for (const auto& a : np.attribute()) {
        if (a.name().empty())
          fail(ExitCode::kInvalidModel, "node '", node.name, "' has an attribute without a name");
        if (!node.attrs.emplace(a.name(), import_attribute(a, *g, depth, node.name)).second)
          fail(ExitCode::kInvalidModel, "node '", node.name, "': attribute '", a.name(),
               "' is given twice");
      }
      const int32_t node_index = static_cast<int32_t>(g->nodes.size());
      for (const auto& o : np.output()) {
        if (o.empty()) {
          node.outputs.push_back(kNoValue);
          continue;
        }
        ValueId existing = g->find(o);
        if (existing != kNoValue) {
          const Value& ev = g->value(existing);
          // This node is not in g->nodes yet, so its own earlier output has no producer entry.
          if (ev.producer == node_index)
            fail(ExitCode::kInvalidModel, "node '", node.name, "' lists output '", o, "' twice");
          std::string by = ev.producer >= 0 ? "node '" + g->nodes[ev.producer].name + "'"
                           : ev.is_initializer ? std::string("an initializer")
                           : ev.outer != kNoValue ? std::string("an enclosing graph")
                                                  : std::string("a graph input");
          fail(ExitCode::kInvalidModel, "value '", o, "' is defined twice: by ", by,
               " and by node '", node.name, "'");
        }
        ValueId id = g->add_value(o);
        g->value(id).producer = node_index;
        node.outputs.push_back(id);
      }
      g->nodes.push_back(std::move(node));
    }

    std::set<std::string> output_names;
    for (const auto& out : gp.output()) {
      if (out.name().empty())
        fail(ExitCode::kInvalidModel, "graph '", g->name, "' has an output without a name");
      if (!output_names.insert(out.name()).second)
        fail(ExitCode::kInvalidModel, "graph '", g->name, "': output '", out.name(),
             "' is listed twice");
      ValueId id = resolve(*g, out.name());
      if (id == kNoValue)
        fail(ExitCode::kInvalidModel, "graph '", g->name, "': output '", out.name(),
             "' is never produced");
      g->outputs.push_back(id);
    }
    if (top && g->outputs.empty())
      fail(ExitCode::kInvalidModel, "graph '", g->name, "' has no outputs");
    return g;
  }

  void apply_dim_options(Model& m) {
    for (const auto& s : symbols_) m.ranges.set(s, sym::Range{0, sym::Range::kUnbounded});
    std::map<std::string, DimExpr> fixed;
    for (const auto& [name, range] : options_.dims) {
      if (!symbols_.count(name)) {
        std::string known;
        for (const auto& s : symbols_) known += (known.empty() ? "" : ", ") + s;
        fail(ExitCode::kUsage, "--dim ", name, ": the model has no dimension named '", name,
             "' (its symbolic dimensions: ", known.empty() ? "none" : known, ")");
      }
      m.ranges.set(name, range);
      if (range.lo == range.hi) fixed.emplace(name, DimExpr(range.lo));
    }
    if (fixed.empty()) return;
    for (ValueId id : m.graph->inputs) {
      Value& v = m.graph->value(id);
      if (!v.shape) continue;
      for (auto& d : *v.shape)
        if (d) d = sym::substitute(*d, fixed);
    }
  }

  std::string model_dir_;
  const ImportOptions& options_;
  std::string display_;
  Model* model_ = nullptr;
  OpsetMap model_opsets_;
  std::map<std::string, const onnx::FunctionProto*> functions_;
  std::map<std::string, OpsetMap> function_opsets_;
  std::set<std::string> symbols_;
  int inline_counter_ = 0;
  int64_t inlined_nodes_ = 0;
};

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Model import_onnx_bytes(std::string_view bytes, const std::string& model_dir,
                        const ImportOptions& options, const std::string& display_name) {
  if (bytes.empty()) fail(ExitCode::kInvalidModel, display_name, ": file is empty");
  if (bytes.size() > kProtobufLimit)
    fail(ExitCode::kInvalidModel, display_name, ": file is ", bytes.size(),
         " bytes, over protobuf's 2 GiB limit; save the model with external data "
         "(onnx.save_model(model, path, save_as_external_data=True))");
  onnx::ModelProto proto;
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(bytes.size()));
  stream.SetRecursionLimit(200);
  if (!proto.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
    fail(ExitCode::kInvalidModel, display_name,
         ": not a valid ONNX model (protobuf parse failed: truncated or not a ModelProto)");
  Importer importer(model_dir, options, display_name);
  Model m = importer.run(proto);
  m.source_path = display_name;
  return m;
}

Model import_onnx_file(const std::string& path, const ImportOptions& options) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(ExitCode::kIo, path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    fail(ExitCode::kIo, path, ": not a regular file");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    close(fd);
    fail(ExitCode::kInvalidModel, path, ": file is empty");
  }
  if (size > kProtobufLimit) {
    close(fd);
    fail(ExitCode::kInvalidModel, path, ": file is ", size,
         " bytes, over protobuf's 2 GiB limit; save the model with external data "
         "(onnx.save_model(model, path, save_as_external_data=True))");
  }
  std::string bytes(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, bytes.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      fail(ExitCode::kIo, path, ": read failed", n < 0 ? std::string(": ") + std::strerror(err) : "");
    }
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  return import_onnx_bytes(bytes, dir_of(path), options, path);
}

std::vector<UnsupportedOp> find_unsupported(const Model& model) {
  std::vector<UnsupportedOp> out;
  std::function<void(const Graph&)> walk = [&](const Graph& g) {
    for (const Node& n : g.nodes) {
      if (n.op == OpKind::Unknown) out.push_back({n.domain, n.op_type, n.name, g.name});
      for (const auto& [k, a] : n.attrs) {
        if (a.g) walk(*a.g);
        for (const auto& sg : a.graphs) walk(*sg);
      }
    }
  };
  walk(*model.graph);
  return out;
}

void check_supported(const Model& model) {
  auto ops = find_unsupported(model);
  if (ops.empty()) return;
  std::map<std::string, std::vector<std::string>> by_op;
  for (const auto& u : ops)
    by_op[(u.domain.empty() ? "" : u.domain + "::") + u.op_type].push_back(u.node_name);
  std::ostringstream os;
  os << ops.size() << " node(s) use operators cuvil does not support:";
  for (const auto& [op, nodes] : by_op) {
    os << "\n  " << op << " (" << nodes.size() << "): ";
    for (size_t i = 0; i < nodes.size() && i < 5; ++i) os << (i ? ", " : "") << "'" << nodes[i] << "'";
    if (nodes.size() > 5) os << ", ...";
  }
  throw Diagnostic(ExitCode::kUnsupported, os.str());
}

std::pair<std::string, sym::Range> parse_dim_option(const std::string& text) {
  auto eq = text.find('=');
  auto bad = [&]() {
    fail(ExitCode::kUsage, "--dim '", text,
         "': expected name=N, name=lo:hi or name=lo: (non-negative integers, lo <= hi)");
  };
  if (eq == std::string::npos || eq == 0) bad();
  std::string name = text.substr(0, eq), spec = text.substr(eq + 1);
  auto number = [&](const std::string& s) -> int64_t {
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) bad();
    return std::stoll(s);
  };
  sym::Range r;
  auto colon = spec.find(':');
  if (colon == std::string::npos) {
    r.lo = r.hi = number(spec);
  } else {
    r.lo = number(spec.substr(0, colon));
    std::string hi = spec.substr(colon + 1);
    r.hi = hi.empty() ? sym::Range::kUnbounded : number(hi);
  }
  if (r.lo > r.hi) bad();
  return {name, r};
}

}  // namespace cuvil::frontend
