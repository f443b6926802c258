#include "frontend/onnx_import.h"

#include <fcntl.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <cerrno>
#include <cstring>
#include <map>
#include <queue>
#include <set>

#include "frontend/ml_ops.h"
#include "frontend/newer_ops.h"
#include "frontend/tensor_proto.h"
#include "support/checked.h"
#include "support/error.h"
#include "support/limits.h"

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
      : model_dir_(model_dir), options_(options), limits_(options.limits), display_(display) {}

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
    check_unknown_fields(proto, nullptr, "model", -1);

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
  // ---- fields newer than cuvil's schema ----
  // The frontend is compiled against Debian's onnx 1.12 schema (IR 8). Fields the schema gained
  // later (NodeProto.overload, FunctionProto.attribute_proto, ...) parse as unknown fields; read
  // as if absent they would silently change the model, so any unknown field on any message is
  // refused, naming it. Two exceptions carry no meaning for the computation: metadata_props
  // (added to ValueInfoProto, NodeProto, GraphProto, TensorProto and FunctionProto after IR 8),
  // free-form annotations that torch 2.x's exporter writes on every node (cuvil never reads
  // ModelProto's own either), and FunctionProto.value_info, type annotations of a function's
  // values that shape inference derives anyway (as it does for an inlined body without them). `parent`/`field`/`index` spell the path to `msg` for the message
  // (built only on failure: models have many messages).
  struct FieldPath {
    const FieldPath* parent;
    const char* field;
    int index;
  };
  static std::string path_text(const FieldPath* p) {
    if (!p) return "";
    std::string s = path_text(p->parent);
    s += (s.empty() ? "" : ".") + std::string(p->field);
    if (p->index >= 0) s += "[" + std::to_string(p->index) + "]";
    return s;
  }
  // The fields of onnx.proto added after IR 8, by message and number, for the message.
  static const char* newer_field_name(const std::string& message, int number) {
    static const std::map<std::pair<std::string, int>, const char*> kNewer = {
        {{"onnx.ValueInfoProto", 4}, "metadata_props"},   {{"onnx.NodeProto", 8}, "overload"},
        {{"onnx.NodeProto", 9}, "metadata_props"},        {{"onnx.NodeProto", 10}, "device_configurations"},
        {{"onnx.GraphProto", 16}, "metadata_props"},      {{"onnx.TensorProto", 16}, "metadata_props"},
        {{"onnx.ModelProto", 26}, "configuration"},       {{"onnx.FunctionProto", 11}, "attribute_proto"},
        {{"onnx.FunctionProto", 12}, "value_info"},       {{"onnx.FunctionProto", 13}, "overload"},
        {{"onnx.FunctionProto", 14}, "metadata_props"},
    };
    auto it = kNewer.find({message, number});
    return it == kNewer.end() ? nullptr : it->second;
  }
  void check_unknown_fields(const google::protobuf::Message& msg, const FieldPath* parent, const char* field,
                            int index) {
    const FieldPath here{parent, field, index};
    const google::protobuf::Reflection* refl = msg.GetReflection();
    const google::protobuf::UnknownFieldSet& unknown = refl->GetUnknownFields(msg);
    const std::string& type = msg.GetDescriptor()->full_name();
    for (int i = 0; i < unknown.field_count(); ++i) {
      const int number = unknown.field(i).number();
      const char* name = newer_field_name(type, number);
      if (name && (std::strcmp(name, "metadata_props") == 0 ||
                   (type == "onnx.FunctionProto" && std::strcmp(name, "value_info") == 0)))
        continue;
      fail(ExitCode::kUnsupported, display_, ": ", path_text(&here), " (", type, ") has field ", number,
           name ? std::string(" '") + name + "', added to ONNX after IR 8," : std::string(),
           " which cuvil's ONNX schema (onnx 1.12, IR 8) does not know; refusing the model rather than "
           "ignoring the field");
    }
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    refl->ListFields(msg, &fields);
    for (const google::protobuf::FieldDescriptor* f : fields) {
      if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (f->is_repeated()) {
        for (int j = 0, n = refl->FieldSize(msg, f); j < n; ++j)
          check_unknown_fields(refl->GetRepeatedMessage(msg, f, j), &here, f->name().c_str(), j);
      } else {
        check_unknown_fields(refl->GetMessage(msg, f), &here, f->name().c_str(), -1);
      }
    }
  }

  // What graph `gp` declares about value `name` before inference (for frontend/newer_ops.h):
  // a graph input, output, value_info or initializer; the output of a Cast (its `to`) or of an
  // op whose result is always bool; or, through up to 32 producers whose output has their
  // first input's type (MatMul, Add, Reshape, Transpose, ...: the projections before an
  // Attention), what that input declares. Only newer ops whose meaning or fused form depends
  // on a type ask.
  static Declared declared_type(const onnx::GraphProto& gp, const std::string& name, int depth = 0) {
    auto from = [](const onnx::ValueInfoProto& vi) {
      Declared d;
      if (!vi.type().has_tensor_type()) return d;
      d.elem = vi.type().tensor_type().elem_type();
      if (!vi.type().tensor_type().has_shape()) return d;
      d.rank = vi.type().tensor_type().shape().dim_size();
      for (const auto& dim : vi.type().tensor_type().shape().dim())
        d.dims.push_back(dim.has_dim_value() && dim.dim_value() >= 0 ? dim.dim_value() : -1);
      return d;
    };
    for (const auto* list : {&gp.input(), &gp.value_info(), &gp.output()})
      for (const auto& vi : *list)
        if (vi.name() == name) return from(vi);
    for (const auto& t : gp.initializer())
      if (t.name() == name) return {t.data_type(), t.dims_size(), {t.dims().begin(), t.dims().end()}};
    static const std::set<std::string> kBoolOps = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
                                                   "Not", "And", "Or", "Xor", "IsNaN", "IsInf"};
    // Ops whose output has input 0's element type (the rank may differ).
    static const std::set<std::string> kSameType = {
        "Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Transpose", "Reshape", "Squeeze", "Unsqueeze",
        "Slice", "Gather", "Concat", "Split", "Identity", "Neg", "Relu", "Softmax", "Sigmoid", "Tanh",
        "LayerNormalization", "RMSNormalization", "RotaryEmbedding", "Expand", "Flatten", "Pad"};
    for (const auto& n : gp.node())
      for (const auto& o : n.output())
        if (o == name && (n.domain().empty() || n.domain() == "ai.onnx")) {
          if (kBoolOps.count(n.op_type())) return {onnx::TensorProto::BOOL, -1, {}};
          if (n.op_type() == "Cast")
            for (const auto& a : n.attribute())
              if (a.name() == "to") return {static_cast<int>(a.i()), -1, {}};
          if (kSameType.count(n.op_type()) && n.input_size() > 0 && depth < 32)
            return {declared_type(gp, n.input(0), depth + 1).elem, -1, {}};
          return {};
        }
    return {};
  }

  // The prefix of the names of the values and nodes one expansion of `node` makes.
  std::string expansion_prefix(const onnx::NodeProto& node) {
    return "__" + (node.name().empty() ? node.op_type() : node.name()) + "_" + std::to_string(inline_counter_++) + "/";
  }

  // The default-domain opset of the nodes an expansion makes when the model imports none (a
  // model of ai.onnx.ml ops only).
  static constexpr int64_t kExpansionDefaultOpset = 13;

  // Appends the nodes an import-time expansion made (newer_ops.h, ml_ops.h), under the node's
  // opsets plus "cuvil" (and the default domain where the model imports none).
  void add_expansion(std::vector<onnx::NodeProto>& made, const OpsetMap* opsets, const std::string& call_site,
                     const std::string& op_type, std::vector<PendingNode>& out) {
    auto [it, fresh] = expansion_opsets_.try_emplace(opsets, *opsets);
    if (fresh) {
      it->second["cuvil"] = 1;
      it->second.try_emplace("", kExpansionDefaultOpset);
    }
    inlined_nodes_ += static_cast<int64_t>(made.size());
    if (inlined_nodes_ > limits_.max_inlined_nodes)
      limit_exceeded(LimitId::max_inlined_nodes, limits_, call_site + ": expanding " + op_type);
    for (auto& m : made) out.push_back({std::move(m), &it->second});
  }

  // ---- function inlining ----
  // `call_site` names the top-level node being expanded ("node 'x' (domain::Op)"), for messages.
  // `graph_depth` is the nesting depth of the graph holding the call, `calls` the functions
  // being expanded around this node (a function among them calls itself). Every node copied
  // out of a function body counts against max_inlined_nodes and its serialized size (subgraph
  // and tensor attributes included) against max_inlined_bytes *before* it is copied: a small
  // file of functions calling each other twice would otherwise copy gigabytes.
  void expand(const onnx::NodeProto& node, const OpsetMap* opsets, int graph_depth,
              std::vector<std::string>& calls, std::vector<PendingNode>& out,
              const std::string& call_site, const TypeLookup& types) {
    std::string key = normalize_domain(node.domain()) + "::" + node.op_type();
    auto fit = functions_.find(key);
    bool builtin = op_from_name(node.domain(), node.op_type()).has_value();
    if (fit == functions_.end() && !builtin && normalize_domain(node.domain()).empty()) {
      // An op of opsets 23..28 that cuvil computes as its fused ops (frontend/newer_ops.h).
      auto def = opsets->find("");
      std::vector<onnx::NodeProto> made;
      std::string why;
      const std::string prefix = expansion_prefix(node);
      if (def != opsets->end() && expand_newer_op(node, def->second, prefix, types, &made, &why)) {
        add_expansion(made, opsets, call_site, node.op_type(), out);
        return;
      }
      if (!why.empty()) fail(ExitCode::kUnsupported, call_site, ": ", why);
    }
    if (fit == functions_.end() && !builtin && node.domain() == "ai.onnx.preview") {
      // FlexAttention: plain ops with its mods inlined (frontend/newer_ops.h).
      auto def = opsets->find("");
      std::vector<onnx::NodeProto> made;
      std::string why;
      const std::string prefix = expansion_prefix(node);
      if (expand_preview_op(node, def != opsets->end() ? def->second : kExpansionDefaultOpset, prefix, types, &made,
                            &why)) {
        add_expansion(made, opsets, call_site, node.op_type(), out);
        return;
      }
      if (!why.empty()) fail(ExitCode::kUnsupported, call_site, ": ", why);
    }
    if (fit == functions_.end() && !builtin && node.domain() == "ai.onnx.ml") {
      // A tree ensemble: cuvil::DecisionForest and its tables (frontend/ml_ops.h).
      auto ml = opsets->find("ai.onnx.ml");
      auto def = opsets->find("");
      std::vector<onnx::NodeProto> made;
      std::string why;
      const std::string prefix = expansion_prefix(node);
      const int64_t ml_opset = ml != opsets->end() ? ml->second : 1;
      switch (expand_ml_op(node, ml_opset, def != opsets->end() ? def->second : kExpansionDefaultOpset, prefix,
                           &made, &why)) {
        case MlExpansion::kExpanded:
          add_expansion(made, opsets, call_site, node.op_type(), out);
          return;
        case MlExpansion::kUnsupported:
          fail(ExitCode::kUnsupported, call_site, ": ", why);
        case MlExpansion::kInvalid:
          fail(ExitCode::kInvalidModel, call_site, ": ", why);
        case MlExpansion::kNotHandled:
          break;
      }
    }
    if (fit == functions_.end() || (builtin && normalize_domain(node.domain()).empty())) {
      out.push_back({node, opsets});
      return;
    }
    if (std::find(calls.begin(), calls.end(), key) != calls.end())
      fail(ExitCode::kInvalidModel, call_site, ": function '", key,
           "' calls itself (recursion cannot be inlined)");
    if (graph_depth + static_cast<int64_t>(calls.size()) + 1 > limits_.max_nesting_depth)
      limit_exceeded(LimitId::max_nesting_depth, limits_,
                     call_site + ": function '" + key + "' inlined " +
                         std::to_string(calls.size() + 1) + " calls deep in a graph nested " +
                         std::to_string(graph_depth) + " levels");
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
    // protos we build against: a model that has them is refused (check_unknown_fields), so an
    // unset referenced attribute is simply left unset.
    const OpsetMap* fopsets = &function_opsets_.at(key);
    calls.push_back(key);
    for (const auto& inner : f.node()) {
      if (++inlined_nodes_ > limits_.max_inlined_nodes)
        limit_exceeded(LimitId::max_inlined_nodes, limits_, call_site + ": inlining '" + key + "'");
      inlined_bytes_ += static_cast<int64_t>(inner.ByteSizeLong());
      if (inlined_bytes_ > limits_.max_inlined_bytes)
        limit_exceeded(LimitId::max_inlined_bytes, limits_, call_site + ": inlining '" + key + "'");
      onnx::NodeProto copy = inner;
      for (auto& in : *copy.mutable_input()) in = mapped(in);
      for (auto& o : *copy.mutable_output()) o = mapped(o);
      if (!copy.name().empty()) copy.set_name(prefix + copy.name());
      bind_attributes(copy, actual, mapped, {});
      expand(copy, fopsets, graph_depth, calls, out, call_site, types);
    }
    calls.pop_back();
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
          if (const char* newer = dt ? nullptr : newer_onnx_type_name(tt.elem_type()))
            fail(ExitCode::kUnsupported, what, " '", v.name, "' has type ", newer, " (elem_type ",
                 tt.elem_type(), "), which cuvil does not support");
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

  // A tensor stored in the model may not exceed max_tensor_elements; checked on the declared
  // dims before any data (possibly external, possibly huge) is read. Bad dims (negative, an
  // element count or byte size that overflows, unknown dtype) make an invalid tensor, which
  // is import_tensor's to report.
  void check_tensor_elements(const onnx::TensorProto& t, const std::string& what) const {
    auto numel = checked_numel(t.dims());
    auto dtype = dtype_from_onnx(t.data_type());
    if (!numel || !dtype || !tensor_byte_size(*dtype, *numel)) return;
    if (*numel > limits_.max_tensor_elements)
      limit_exceeded(LimitId::max_tensor_elements, limits_,
                     what + " has " + std::to_string(*numel) + " elements");
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
        check_tensor_elements(a.t(), ctx);
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
        for (const auto& t : a.tensors()) {
          check_tensor_elements(t, ctx);
          r.tensors.push_back(import_tensor(t, model_dir_, ctx));
        }
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
    // Also checked by scan_model_wire before the parse; subgraphs that inlined functions bring
    // along are only seen here.
    if (depth > limits_.max_nesting_depth)
      limit_exceeded(LimitId::max_nesting_depth, limits_,
                     "subgraph '" + gp.name() + "' nested " + std::to_string(depth) + " levels deep");
    auto g = std::make_shared<Graph>();
    g->name = gp.name().empty() ? (parent ? "subgraph" : "main") : gp.name();
    g->parent = parent;
    const bool top = parent == nullptr;

    std::set<std::string> initializer_names;
    for (const auto& t : gp.initializer()) {
      if (t.name().empty())
        fail(ExitCode::kInvalidModel, "graph '", g->name, "' has an initializer without a name");
      check_tensor_elements(t, "graph '" + g->name + "': initializer '" + t.name() + "'");
      if (!initializer_names.insert(t.name()).second)
        fail(ExitCode::kInvalidModel, "graph '", g->name, "': initializer '", t.name(),
             "' is defined twice");
      ValueId id = g->add_value(t.name());
      Value& v = g->value(id);
      v.data = import_tensor(t, model_dir_, "initializer");
      // The proto is the importer's own (a local of import_onnx_*) and nothing reads this
      // tensor's bytes again: release them now, so a model's weights are held once, not twice
      // (peak memory of a compile, docs/PERF.md).
      std::string().swap(*const_cast<onnx::TensorProto&>(t).mutable_raw_data());
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
    std::vector<std::string> calls;
    const TypeLookup types = [&gp](const std::string& name) { return declared_type(gp, name); };
    for (int i = 0; i < gp.node_size(); ++i) {
      const onnx::NodeProto& n = gp.node(i);
      expand(n, &model_opsets_, depth, calls, pending,
             "node '" + node_label(n, static_cast<size_t>(i)) + "' (" + node_domain_op(n) + ")", types);
    }
    total_nodes_ += static_cast<int64_t>(pending.size());
    if (total_nodes_ > limits_.max_nodes)
      limit_exceeded(LimitId::max_nodes, limits_,
                     "graph '" + g->name + "' (after inlining functions)");
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
          // This node is not in g->nodes yet: its own earlier output is not indexable there.
          if (ev.producer == node_index)
            fail(ExitCode::kInvalidModel, "node '", node.name, "' (", node.op_type,
                 ") lists output '", o, "' twice");
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
  const CompileLimits& limits_;
  std::string display_;
  Model* model_ = nullptr;
  OpsetMap model_opsets_;
  std::map<std::string, const onnx::FunctionProto*> functions_;
  std::map<std::string, OpsetMap> function_opsets_;
  // The opsets of nodes expanded from newer ONNX ops: those of the graph or function holding
  // the op, plus "cuvil" (stable addresses: PendingNode points at them).
  std::map<const OpsetMap*, OpsetMap> expansion_opsets_;
  std::set<std::string> symbols_;
  int inline_counter_ = 0;
  int64_t inlined_nodes_ = 0;
  int64_t inlined_bytes_ = 0;
  int64_t total_nodes_ = 0;
};

// ---- wire-format scan (scan_model_wire) ----
// The messages on the path from ModelProto to every NodeProto and nested GraphProto; all
// other fields are skipped without being read.
enum class WireMsg { kModel, kGraph, kNode, kAttribute, kFunction, kOther };

WireMsg wire_child(WireMsg parent, uint32_t field) {
  switch (parent) {
    case WireMsg::kModel: return field == 7 ? WireMsg::kGraph : field == 25 ? WireMsg::kFunction : WireMsg::kOther;
    case WireMsg::kGraph: return field == 1 ? WireMsg::kNode : WireMsg::kOther;
    case WireMsg::kFunction: return field == 7 ? WireMsg::kNode : WireMsg::kOther;
    case WireMsg::kNode: return field == 5 ? WireMsg::kAttribute : WireMsg::kOther;
    case WireMsg::kAttribute: return field == 6 || field == 11 ? WireMsg::kGraph : WireMsg::kOther;
    case WireMsg::kOther: break;
  }
  return WireMsg::kOther;
}

class WireScanner {
 public:
  WireScanner(const CompileLimits& limits, const std::string& display)
      : limits_(limits), display_(display) {}

  // Malformed bytes end the scan quietly: the real parse that follows reports them.
  void scan(google::protobuf::io::CodedInputStream& in, WireMsg msg, int graph_depth, int levels) {
    using google::protobuf::internal::WireFormatLite;
    if (levels > kMaxMessageLevels) return;  // the parser's recursion limit refuses these
    for (;;) {
      const uint32_t tag = in.ReadTag();
      if (tag == 0) return;
      const WireMsg child = wire_child(msg, WireFormatLite::GetTagFieldNumber(tag));
      if (child == WireMsg::kOther ||
          WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        if (!WireFormatLite::SkipField(&in, tag)) return;
        continue;
      }
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return;
      auto limit = in.PushLimit(static_cast<int>(std::min<uint32_t>(length, INT32_MAX)));
      int depth = graph_depth;
      if (child == WireMsg::kNode && ++counts_.nodes > limits_.max_nodes)
        limit_exceeded(LimitId::max_nodes, limits_, display_ + " (counted before parsing)");
      if (child == WireMsg::kGraph && msg == WireMsg::kAttribute) {
        depth = graph_depth + 1;
        if (depth > limits_.max_nesting_depth)
          limit_exceeded(LimitId::max_nesting_depth, limits_,
                         display_ + ": a subgraph is nested " + std::to_string(depth) + " levels deep");
        counts_.depth = std::max(counts_.depth, depth);
      }
      scan(in, child, depth, levels + 1);
      if (in.BytesUntilLimit() > 0 && !in.Skip(in.BytesUntilLimit())) return;
      in.PopLimit(limit);
    }
  }
  WireCounts counts() const { return counts_; }

 private:
  static constexpr int kMaxMessageLevels = 200;  // as the parse (SetRecursionLimit)
  const CompileLimits& limits_;
  const std::string& display_;
  WireCounts counts_;
};

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

WireCounts scan_model_wire(std::string_view bytes, const CompileLimits& limits,
                           const std::string& display_name) {
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(std::min<size_t>(bytes.size(), INT32_MAX)));
  WireScanner scanner(limits, display_name);
  scanner.scan(stream, WireMsg::kModel, 0, 0);
  return scanner.counts();
}

Model import_onnx_bytes(std::string_view bytes, const std::string& model_dir,
                        const ImportOptions& options, const std::string& display_name) {
  if (bytes.empty()) fail(ExitCode::kInvalidModel, display_name, ": file is empty");
  if (bytes.size() > kProtobufLimit)
    fail(ExitCode::kInvalidModel, display_name, ": file is ", bytes.size(),
         " bytes, over protobuf's 2 GiB limit; save the model with external data "
         "(onnx.save_model(model, path, save_as_external_data=True))");
  scan_model_wire(bytes, options.limits, display_name);
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
  // Streamed from the file twice (the wire scan, then the parse) rather than read into one
  // buffer, so the file's bytes are never held next to the parsed proto.
  struct CloseFd {
    int fd;
    ~CloseFd() { close(fd); }
  } closer{fd};
  auto rewind = [&] {
    if (lseek(fd, 0, SEEK_SET) != 0) fail(ExitCode::kIo, path, ": cannot seek: ", std::strerror(errno));
  };
  auto read_failed = [&](int err) {
    fail(ExitCode::kIo, path, ": read failed", err ? std::string(": ") + std::strerror(err) : "");
  };
  {
    google::protobuf::io::FileInputStream file(fd);
    google::protobuf::io::CodedInputStream stream(&file);
    stream.SetTotalBytesLimit(static_cast<int>(size));
    WireScanner scanner(options.limits, path);
    scanner.scan(stream, WireMsg::kModel, 0, 0);
    if (file.GetErrno()) read_failed(file.GetErrno());
  }
  rewind();
  onnx::ModelProto proto;
  {
    google::protobuf::io::FileInputStream file(fd);
    google::protobuf::io::CodedInputStream stream(&file);
    stream.SetTotalBytesLimit(static_cast<int>(size));
    stream.SetRecursionLimit(200);
    const bool parsed = proto.ParseFromCodedStream(&stream) && stream.ConsumedEntireMessage();
    if (file.GetErrno()) read_failed(file.GetErrno());
    if (!parsed)
      fail(ExitCode::kInvalidModel, path,
           ": not a valid ONNX model (protobuf parse failed: truncated or not a ModelProto)");
  }
  Importer importer(dir_of(path), options, path);
  Model m = importer.run(proto);
  m.source_path = path;
  return m;
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

namespace {
// What a user can do about an unsupported op that has a known way around it.
const char* unsupported_hint(const std::string& op) {
  if (op == "ai.onnx.ml::ZipMap")
    return "ZipMap turns class scores into a sequence of maps, which cuvil cannot hold; export the "
           "classifier without it (skl2onnx: options={id(model): {'zipmap': False}}) to get the "
           "scores as a tensor";
  if (op == "ai.onnx.ml::CastMap" || op == "ai.onnx.ml::DictVectorizer")
    return "it reads a map, which cuvil cannot hold";
  return nullptr;
}
}  // namespace

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
    if (const char* hint = unsupported_hint(op)) os << "\n    " << hint;
  }
  throw Diagnostic(ExitCode::kUnsupported, os.str());
}

std::pair<std::string, sym::Range> parse_dim_option(const std::string& text) {
  const auto eq = text.find('=');
  std::optional<sym::Range> r;
  if (eq != std::string::npos && eq != 0) r = sym::parse_range(std::string_view(text).substr(eq + 1));
  if (!r)
    fail(ExitCode::kUsage, "--dim '", text,
         "': expected name=N, name=lo:hi or name=lo: (non-negative integers, lo <= hi)");
  return {text.substr(0, eq), *r};
}

}  // namespace cuvil::frontend
