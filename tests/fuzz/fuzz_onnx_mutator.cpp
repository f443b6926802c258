// The structure-aware mutator of fuzz_onnx (Debian has no libprotobuf-mutator): an input that
// parses as an onnx::ModelProto gets one to three mutations of its structure (op types from
// ir/ops.def and the control-flow ops, attributes of every kind including subgraphs, node
// inputs and outputs, value types and dims, initializers, node order, nesting a node into a
// new If or Loop, opset imports, ir_version, model-local functions) and is serialised again;
// anything else, and one mutation in eight, goes to libFuzzer's byte-level mutator, so the
// protobuf parser itself is fuzzed too. Random byte flips almost never keep a ModelProto
// well-formed, which is why the byte mutator alone does not get past the importer.
//
// Only the libFuzzer build links this file (it needs LLVMFuzzerMutate).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

struct OpName {
  const char* name;
  const char* domain;
};

// Every op cuvil knows, straight from the op table.
const OpName kOps[] = {
#define CUVIL_OP(Name, domain, shape_rule, flags) {#Name, domain},
#include "ir/ops.def"
#undef CUVIL_OP
};

const OpName kControlFlowOps[] = {{"If", ""}, {"Loop", ""}, {"Scan", ""}};

// Attribute names that ops read; a random one of these is more useful than random text.
const char* const kAttrNames[] = {
    "axis", "axes", "keepdims", "perm", "shape", "to", "value", "alpha", "beta", "transA",
    "transB", "pads", "strides", "kernel_shape", "dilations", "group", "auto_pad", "mode",
    "then_branch", "else_branch", "body", "num_scan_inputs", "scan_input_axes",
    "scan_output_axes", "scan_input_directions", "scan_output_directions", "split",
    "num_outputs", "starts", "ends", "epsilon", "batch_dims", "direction", "allowzero",
    "value_float", "value_ints", "value_int", "sorted", "largest", "k", "dtype", "seed"};

const int64_t kInterestingInts[] = {0,  1,  -1, 2,  3,  -2, 4,  7, 8,  16, 255, 256, 1 << 20,
                                    int64_t{1} << 31, int64_t{1} << 40, INT64_MAX, INT64_MIN};

// ONNX TensorProto.DataType values 0..25 plus one out of range.
constexpr int kMaxDataType = 26;

class Mutator {
 public:
  Mutator(onnx::ModelProto* model, unsigned seed) : model_(model), rng_(seed) {}

  void mutate_once() {
    collect();
    switch (below(16)) {
      case 0: change_op_type(); break;
      case 1: case 2: mutate_attribute(); break;
      case 3: case 4: mutate_node_io(); break;
      case 5: case 6: mutate_value_info(); break;
      case 7: mutate_initializer(); break;
      case 8: mutate_node_order(); break;
      case 9: nest_node(); break;
      case 10: mutate_opsets(); break;
      case 11: mutate_functions(); break;
      case 12: mutate_graph_io(); break;
      case 13: copy_node_across_graphs(); break;
      case 14: set_graph_attribute(); break;
      default: change_op_type_to_control_flow(); break;
    }
  }

 private:
  // ---- randomness ----
  size_t below(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool coin() { return below(2) == 0; }
  int64_t interesting_int() {
    if (below(4) == 0) return static_cast<int64_t>(rng_()) - (1 << 30);
    return kInterestingInts[below(std::size(kInterestingInts))];
  }
  template <typename T>
  T* pick(const std::vector<T*>& v) { return v.empty() ? nullptr : v[below(v.size())]; }

  // ---- what there is to mutate: every graph (main and nested) and every function body ----
  void collect() {
    graphs_.clear();
    node_lists_.clear();
    nodes_.clear();
    names_.clear();
    if (model_->has_graph()) collect_graph(model_->mutable_graph());
    for (auto& f : *model_->mutable_functions()) {
      node_lists_.push_back(f.mutable_node());
      for (auto& n : *f.mutable_node()) collect_node(&n);
      for (const auto& s : f.input()) names_.push_back(s);
    }
  }
  void collect_graph(onnx::GraphProto* g) {
    if (graphs_.size() > 256) return;
    graphs_.push_back(g);
    node_lists_.push_back(g->mutable_node());
    for (const auto& v : g->input()) names_.push_back(v.name());
    for (const auto& t : g->initializer()) names_.push_back(t.name());
    for (auto& n : *g->mutable_node()) collect_node(&n);
  }
  void collect_node(onnx::NodeProto* n) {
    nodes_.push_back(n);
    for (const auto& s : n->output()) names_.push_back(s);
    for (auto& a : *n->mutable_attribute()) {
      if (a.has_g()) collect_graph(a.mutable_g());
      for (auto& g : *a.mutable_graphs()) collect_graph(&g);
    }
  }
  std::string some_name() {
    switch (below(6)) {
      case 0: return "";
      case 1: return "fuzz_" + std::to_string(below(8));
      default: return names_.empty() ? std::string("x") : names_[below(names_.size())];
    }
  }
  onnx::NodeProto* some_node() { return pick(nodes_); }

  // ---- op types ----
  void change_op_type() {
    onnx::NodeProto* n = some_node();
    if (!n) return;
    if (below(16) == 0) {
      n->set_op_type(coin() ? "" : "NoSuchOp");
      return;
    }
    const OpName& op = kOps[below(std::size(kOps))];
    n->set_op_type(op.name);
    n->set_domain(op.domain);
  }
  void change_op_type_to_control_flow() {
    onnx::NodeProto* n = some_node();
    if (!n) return;
    const OpName& op = kControlFlowOps[below(std::size(kControlFlowOps))];
    n->set_op_type(op.name);
    n->set_domain(op.domain);
    if (coin()) set_graph_attribute_on(n);
  }

  // ---- attributes ----
  void fill_attribute(onnx::AttributeProto* a) {
    using A = onnx::AttributeProto;
    const int kind = static_cast<int>(below(11));
    a->clear_ints(); a->clear_floats(); a->clear_strings(); a->clear_tensors(); a->clear_graphs();
    a->clear_t(); a->clear_g(); a->clear_i(); a->clear_f(); a->clear_s();
    switch (kind) {
      case 0: a->set_type(A::INT); a->set_i(interesting_int()); break;
      case 1: a->set_type(A::FLOAT); a->set_f(coin() ? 0.f : (coin() ? 1e30f : -1.5f)); break;
      case 2: a->set_type(A::STRING); a->set_s(coin() ? "" : "SAME_UPPER"); break;
      case 3: {
        a->set_type(A::INTS);
        const size_t n = below(6);
        for (size_t i = 0; i < n; ++i) a->add_ints(interesting_int());
        break;
      }
      case 4: a->set_type(A::FLOATS); for (size_t i = below(4); i > 0; --i) a->add_floats(0.5f); break;
      case 5: a->set_type(A::STRINGS); for (size_t i = below(4); i > 0; --i) a->add_strings(some_name()); break;
      case 6: a->set_type(A::TENSOR); random_tensor(a->mutable_t()); break;
      case 7: a->set_type(A::GRAPH); random_graph(a->mutable_g()); break;
      case 8: a->set_type(A::GRAPHS); random_graph(a->add_graphs()); break;
      case 9: a->set_type(A::TENSORS); random_tensor(a->add_tensors()); break;
      default: a->set_type(static_cast<A::AttributeType>(below(16))); break;  // type without payload
    }
  }
  void mutate_attribute() {
    onnx::NodeProto* n = some_node();
    if (!n) return;
    auto* attrs = n->mutable_attribute();
    switch (below(5)) {
      case 0: {  // add
        onnx::AttributeProto* a = attrs->Add();
        a->set_name(coin() || attrs->size() < 2 ? kAttrNames[below(std::size(kAttrNames))]
                                                : attrs->Get(static_cast<int>(below(attrs->size() - 1))).name());
        fill_attribute(a);
        break;
      }
      case 1:  // remove
        if (!attrs->empty()) attrs->DeleteSubrange(static_cast<int>(below(attrs->size())), 1);
        break;
      case 2:  // retype in place
        if (!attrs->empty()) fill_attribute(attrs->Mutable(static_cast<int>(below(attrs->size()))));
        break;
      case 3: {  // tweak the values
        if (attrs->empty()) return;
        onnx::AttributeProto* a = attrs->Mutable(static_cast<int>(below(attrs->size())));
        if (a->ints_size() > 0) {
          if (coin()) a->set_ints(static_cast<int>(below(a->ints_size())), interesting_int());
          else if (coin()) a->add_ints(interesting_int());
          else a->mutable_ints()->RemoveLast();
        } else if (a->has_i() || a->type() == onnx::AttributeProto::INT) {
          a->set_i(interesting_int());
        } else if (a->has_t()) {
          mutate_tensor(a->mutable_t());
        } else if (a->has_g()) {
          random_graph_edit(a->mutable_g());
        } else {
          a->set_name(kAttrNames[below(std::size(kAttrNames))]);
        }
        break;
      }
      default:  // a reference to a function attribute, valid only inside a function
        if (!attrs->empty()) attrs->Mutable(static_cast<int>(below(attrs->size())))->set_ref_attr_name("alpha");
        break;
    }
  }
  void set_graph_attribute() {
    onnx::NodeProto* n = some_node();
    if (n) set_graph_attribute_on(n);
  }
  void set_graph_attribute_on(onnx::NodeProto* n) {
    static const char* const kGraphAttrs[] = {"then_branch", "else_branch", "body"};
    const char* name = kGraphAttrs[below(3)];
    onnx::AttributeProto* a = nullptr;
    for (auto& existing : *n->mutable_attribute())
      if (existing.name() == name) a = &existing;
    if (!a) a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto copy;
    onnx::GraphProto* source = pick(graphs_);
    if (source && coin()) copy = *source;  // copy a subgraph (or the main graph) from elsewhere
    else random_graph(&copy);
    *a->mutable_g() = std::move(copy);
  }
  void random_graph_edit(onnx::GraphProto* g) {
    if (g->node_size() > 0 && coin()) g->mutable_node()->DeleteSubrange(static_cast<int>(below(g->node_size())), 1);
    else if (g->output_size() > 0) g->mutable_output()->DeleteSubrange(static_cast<int>(below(g->output_size())), 1);
    else g->add_input()->set_name(some_name());
  }
  // A small graph: Identity of an (optionally typed) input, or of an outer value.
  void random_graph(onnx::GraphProto* g) {
    g->Clear();
    g->set_name("fuzz_graph");
    const std::string in = coin() ? std::string("g_in") : some_name();
    if (in == "g_in") random_value_info(g->add_input(), "g_in");
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(coin() ? "Identity" : kOps[below(std::size(kOps))].name);
    n->add_input(in);
    n->add_output("g_out");
    random_value_info(g->add_output(), "g_out");
  }

  // ---- node inputs and outputs ----
  void mutate_repeated_names(google::protobuf::RepeatedPtrField<std::string>* v) {
    const int size = v->size();
    switch (below(6)) {
      case 0: if (size > 0) v->DeleteSubrange(static_cast<int>(below(size)), 1); break;
      case 1: if (size > 0) *v->Add() = v->Get(static_cast<int>(below(size))); break;
      case 2: if (size > 1) v->SwapElements(static_cast<int>(below(size)), static_cast<int>(below(size))); break;
      case 3: if (size > 0) *v->Mutable(static_cast<int>(below(size))) = ""; break;
      case 4: *v->Add() = some_name(); break;
      default: if (size > 0) *v->Mutable(static_cast<int>(below(size))) = some_name(); break;
    }
  }
  void mutate_node_io() {
    onnx::NodeProto* n = some_node();
    if (!n) return;
    mutate_repeated_names(coin() ? n->mutable_input() : n->mutable_output());
  }

  // ---- types and shapes ----
  void random_dim(onnx::TensorShapeProto::Dimension* d) {
    switch (below(8)) {
      case 0: d->set_dim_value(0); break;
      case 1: d->set_dim_value(-1); break;
      case 2: d->set_dim_value(int64_t{1} << 40); break;
      case 3: d->set_dim_value(INT64_MAX); break;
      case 4: d->set_dim_param(coin() ? "N" : ""); break;
      case 5: d->clear_dim_value(); d->clear_dim_param(); break;
      default: d->set_dim_value(static_cast<int64_t>(below(5)) + 1); break;
    }
  }
  void random_value_info(onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(below(3) == 0 ? static_cast<int>(below(kMaxDataType)) : 1);
    if (coin()) {
      auto* shape = tt->mutable_shape();
      for (size_t i = below(4); i > 0; --i) random_dim(shape->add_dim());
    }
  }
  void mutate_type(onnx::TypeProto* t) {
    switch (below(7)) {
      case 0: t->mutable_tensor_type()->set_elem_type(static_cast<int>(below(kMaxDataType))); break;
      case 1: {
        auto* shape = t->mutable_tensor_type()->mutable_shape();
        if (shape->dim_size() > 0) random_dim(shape->mutable_dim(static_cast<int>(below(shape->dim_size()))));
        else random_dim(shape->add_dim());
        break;
      }
      case 2: random_dim(t->mutable_tensor_type()->mutable_shape()->add_dim()); break;
      case 3: {
        auto* shape = t->mutable_tensor_type()->mutable_shape();
        if (shape->dim_size() > 0) shape->mutable_dim()->RemoveLast();
        else t->mutable_tensor_type()->clear_shape();
        break;
      }
      case 4: {  // a sequence or optional of what was there
        onnx::TypeProto inner = *t;
        if (coin()) *t->mutable_sequence_type()->mutable_elem_type() = inner;
        else *t->mutable_optional_type()->mutable_elem_type() = inner;
        break;
      }
      case 5: t->Clear(); break;
      default: t->mutable_map_type()->set_key_type(7); break;
    }
  }
  void mutate_value_info() {
    onnx::GraphProto* g = pick(graphs_);
    if (!g) return;
    std::vector<onnx::ValueInfoProto*> infos;
    for (auto& v : *g->mutable_input()) infos.push_back(&v);
    for (auto& v : *g->mutable_output()) infos.push_back(&v);
    for (auto& v : *g->mutable_value_info()) infos.push_back(&v);
    if (infos.empty() || below(6) == 0) {
      random_value_info(g->add_value_info(), some_name());
      return;
    }
    mutate_type(pick(infos)->mutable_type());
  }

  // ---- tensors ----
  void random_tensor(onnx::TensorProto* t) {
    t->Clear();
    t->set_name(some_name());
    t->set_data_type(coin() ? 1 : static_cast<int>(below(kMaxDataType)));
    for (size_t i = below(3); i > 0; --i) t->add_dims(static_cast<int64_t>(below(4)));
    t->set_raw_data(std::string(below(4) * 4, '\x01'));
  }
  void mutate_tensor(onnx::TensorProto* t) {
    switch (below(8)) {
      case 0: t->set_data_type(static_cast<int>(below(kMaxDataType))); break;
      case 1: if (t->dims_size() > 0) t->set_dims(static_cast<int>(below(t->dims_size())), interesting_int()); break;
      case 2: t->add_dims(coin() ? 1 : interesting_int()); break;
      case 3: if (t->dims_size() > 0) t->mutable_dims()->RemoveLast(); break;
      case 4: {  // raw_data size
        std::string raw = t->raw_data();
        if (coin() && !raw.empty()) raw.resize(below(raw.size()));
        else raw.append(below(9), '\0');
        t->set_raw_data(raw);
        break;
      }
      case 5: t->add_int64_data(interesting_int()); t->add_float_data(1.f); break;  // typed and raw
      case 6: t->set_data_location(onnx::TensorProto::EXTERNAL); break;
      default: t->clear_raw_data(); break;
    }
  }
  void mutate_initializer() {
    std::vector<onnx::TensorProto*> tensors;
    for (onnx::GraphProto* g : graphs_)
      for (auto& t : *g->mutable_initializer()) tensors.push_back(&t);
    for (onnx::NodeProto* n : nodes_)
      for (auto& a : *n->mutable_attribute())
        if (a.has_t()) tensors.push_back(a.mutable_t());
    onnx::TensorProto* t = pick(tensors);
    if (t && below(8) != 0) {
      mutate_tensor(t);
    } else if (onnx::GraphProto* g = pick(graphs_)) {
      random_tensor(g->add_initializer());
    }
  }

  // ---- node order ----
  void mutate_node_order() {
    auto* list = pick(node_lists_);
    if (!list || list->empty()) return;
    const int size = list->size();
    switch (below(4)) {
      case 0: list->DeleteSubrange(static_cast<int>(below(size)), 1); break;
      case 1: *list->Add() = list->Get(static_cast<int>(below(size))); break;
      case 2: list->SwapElements(static_cast<int>(below(size)), static_cast<int>(below(size))); break;
      default: std::reverse(list->begin(), list->end()); break;
    }
  }
  void copy_node_across_graphs() {
    onnx::NodeProto* n = some_node();
    auto* list = pick(node_lists_);
    if (!n || !list) return;
    onnx::NodeProto copy = *n;
    *list->Add() = std::move(copy);
    if (list->size() > 1 && coin()) list->SwapElements(list->size() - 1, static_cast<int>(below(list->size())));
  }

  // ---- nesting: replace a node by an If or a Loop whose body holds it ----
  void nest_node() {
    auto* list = pick(node_lists_);
    if (!list || list->empty()) return;
    const int at = static_cast<int>(below(list->size()));
    onnx::NodeProto inner = list->Get(at);
    onnx::NodeProto outer;
    outer.set_name("fuzz_nest");
    for (const auto& o : inner.output()) outer.add_output(o);
    auto add_body = [&](const char* attr_name, bool loop) {
      onnx::AttributeProto* a = outer.add_attribute();
      a->set_name(attr_name);
      a->set_type(onnx::AttributeProto::GRAPH);
      onnx::GraphProto* body = a->mutable_g();
      body->set_name(attr_name);
      if (loop) {
        onnx::ValueInfoProto* iter = body->add_input();
        iter->set_name("fuzz_iter");
        iter->mutable_type()->mutable_tensor_type()->set_elem_type(7);
        iter->mutable_type()->mutable_tensor_type()->mutable_shape();
        onnx::ValueInfoProto* cond = body->add_input();
        cond->set_name("fuzz_cond_in");
        cond->mutable_type()->mutable_tensor_type()->set_elem_type(9);
        cond->mutable_type()->mutable_tensor_type()->mutable_shape();
        onnx::NodeProto* id = body->add_node();
        id->set_op_type("Identity");
        id->add_input("fuzz_cond_in");
        id->add_output("fuzz_cond_out");
        body->add_output()->set_name("fuzz_cond_out");
      }
      onnx::NodeProto copy = inner;
      std::string prefix = std::string(attr_name) + "_";
      for (auto& o : *copy.mutable_output()) o = prefix + o;
      for (const auto& o : copy.output()) {
        onnx::ValueInfoProto* v = body->add_output();
        v->set_name(o);
        if (coin()) v->mutable_type()->mutable_tensor_type()->set_elem_type(1);
      }
      *body->add_node() = std::move(copy);
    };
    if (coin()) {
      outer.set_op_type("If");
      outer.add_input(coin() ? some_name() : std::string("fuzz_cond"));
      add_body("then_branch", false);
      add_body("else_branch", false);
    } else {
      outer.set_op_type("Loop");
      outer.add_input(coin() ? std::string("") : some_name());  // trip count
      outer.add_input(coin() ? std::string("") : some_name());  // condition
      add_body("body", true);
    }
    *list->Mutable(at) = std::move(outer);
  }

  // ---- model-level fields ----
  void mutate_opsets() {
    switch (below(5)) {
      case 0: model_->set_ir_version(interesting_int()); break;
      case 1:
        if (model_->opset_import_size() > 0)
          model_->mutable_opset_import(static_cast<int>(below(model_->opset_import_size())))
              ->set_version(coin() ? static_cast<int64_t>(below(25)) : interesting_int());
        break;
      case 2: {
        onnx::OperatorSetIdProto* o = model_->add_opset_import();
        static const char* const kDomains[] = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "local", "x"};
        o->set_domain(kDomains[below(std::size(kDomains))]);
        o->set_version(static_cast<int64_t>(below(24)));
        break;
      }
      case 3:
        if (model_->opset_import_size() > 0)
          model_->mutable_opset_import()->DeleteSubrange(static_cast<int>(below(model_->opset_import_size())), 1);
        break;
      default: model_->set_ir_version(static_cast<int64_t>(below(12))); break;
    }
  }
  void mutate_functions() {
    auto* functions = model_->mutable_functions();
    if (functions->empty() || below(3) == 0) {
      // A function made of one node, and a node of the main graph turned into a call to it.
      onnx::NodeProto* n = some_node();
      if (!n) return;
      onnx::FunctionProto* f = functions->Add();
      f->set_name("fuzz_fn" + std::to_string(functions->size()));
      f->set_domain("local");
      for (const auto& i : n->input()) f->add_input(i);
      for (const auto& o : n->output()) f->add_output(o);
      *f->add_node() = *n;
      f->add_opset_import()->set_version(17);
      if (coin()) f->add_attribute("alpha");
      if (coin()) {
        onnx::OperatorSetIdProto* o = model_->add_opset_import();
        o->set_domain("local");
        o->set_version(1);
      }
      n->set_op_type(f->name());
      n->set_domain(f->domain());
      return;
    }
    onnx::FunctionProto* f = functions->Mutable(static_cast<int>(below(functions->size())));
    switch (below(5)) {
      case 0: mutate_repeated_names(f->mutable_input()); break;
      case 1: mutate_repeated_names(f->mutable_output()); break;
      case 2: f->set_domain(coin() ? "" : "other"); break;
      case 3: f->add_attribute(kAttrNames[below(std::size(kAttrNames))]); break;
      default: {  // call it from somewhere, perhaps from its own body (recursion)
        onnx::NodeProto* n = some_node();
        if (n) { n->set_op_type(f->name()); n->set_domain(f->domain()); }
        break;
      }
    }
  }
  void mutate_graph_io() {
    onnx::GraphProto* g = pick(graphs_);
    if (!g) return;
    switch (below(5)) {
      case 0: if (g->input_size() > 0) g->mutable_input()->DeleteSubrange(static_cast<int>(below(g->input_size())), 1); break;
      case 1: if (g->output_size() > 0) g->mutable_output()->DeleteSubrange(static_cast<int>(below(g->output_size())), 1); break;
      case 2: if (g->output_size() > 0) *g->add_output() = g->output(static_cast<int>(below(g->output_size()))); break;
      case 3: random_value_info(g->add_input(), some_name()); break;
      default: random_value_info(g->add_output(), some_name()); break;
    }
  }

  onnx::ModelProto* model_;
  std::mt19937 rng_;
  std::vector<onnx::GraphProto*> graphs_;
  std::vector<google::protobuf::RepeatedPtrField<onnx::NodeProto>*> node_lists_;
  std::vector<onnx::NodeProto*> nodes_;
  std::vector<std::string> names_;
};

// Writes `model` into data when it fits; 0 otherwise.
size_t serialize_into(const onnx::ModelProto& model, uint8_t* data, size_t max_size) {
  std::string out;
  if (!model.SerializeToString(&out) || out.empty() || out.size() > max_size) return 0;
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  onnx::ModelProto model;
  if (seed % 8 != 0 && model.ParseFromArray(data, static_cast<int>(size))) {
    Mutator mutator(&model, seed);
    const unsigned rounds = 1 + (seed >> 3) % 3;
    for (unsigned i = 0; i < rounds; ++i) mutator.mutate_once();
    if (size_t n = serialize_into(model, data, max_size)) return n;
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

// Cross-over of two models: the first with some nodes, initializers and functions of the
// second spliced in (names are kept, so values from both can meet). Unparsable inputs fall
// back to splicing bytes.
extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* data1, size_t size1, const uint8_t* data2,
                                            size_t size2, uint8_t* out, size_t max_out_size,
                                            unsigned int seed) {
  std::mt19937 rng(seed);
  onnx::ModelProto a, b;
  if (a.ParseFromArray(data1, static_cast<int>(size1)) && b.ParseFromArray(data2, static_cast<int>(size2)) &&
      a.has_graph() && b.has_graph()) {
    for (const auto& n : b.graph().node())
      if (rng() % 3 == 0) *a.mutable_graph()->add_node() = n;
    for (const auto& t : b.graph().initializer())
      if (rng() % 3 == 0) *a.mutable_graph()->add_initializer() = t;
    for (const auto& f : b.functions())
      if (rng() % 2 == 0) *a.add_functions() = f;
    if (size_t n = serialize_into(a, out, max_out_size)) return n;
  }
  const size_t head = size1 == 0 ? 0 : rng() % (size1 + 1);
  const size_t tail_from = size2 == 0 ? 0 : rng() % (size2 + 1);
  size_t n = std::min(head, max_out_size);
  std::memcpy(out, data1, n);
  const size_t rest = std::min(size2 - tail_from, max_out_size - n);
  std::memcpy(out + n, data2 + tail_from, rest);
  return n + rest;
}
