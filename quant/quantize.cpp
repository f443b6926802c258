// W8A8 calibration, QDQ insertion and the per-layer error report (quant/quantize.h).
#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"
#include "quant/calib_data.h"
#include "quant/observer.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/include/cuvil.h"
#include "support/error.h"

namespace cuvil::quant {
namespace {

using onnx::TensorProto;

// ---- Running a ModelProto on libcuvil in process ------------------------------------------

// Compiles a ModelProto the way `cuvilc compile` does and runs it through the C API, one
// thread (the same reduction order everywhere), for the calibration and report passes.
class PackageRunner {
 public:
  PackageRunner(const onnx::ModelProto& proto, const QuantizeRequest& req, const std::string& what) : what_(what) {
    std::string bytes;
    CUVIL_ASSERT(proto.SerializeToString(&bytes), "cannot serialize the " << what << " model");
    frontend::ImportOptions io;
    io.dims = req.dims;
    io.limits = req.limits;
    Model m = frontend::import_onnx_bytes(bytes, req.model_dir, io, req.display_name + " (" + what + ")");
    verify_model(m);
    PipelineOptions po;
    po.context.limits = req.limits;
    run_passes(m, po);
    frontend::check_supported(m);
    codegen::LowerOptions lo;
    const std::vector<uint8_t> pkg = codegen::build_package(m, codegen::lower_model(m, lo));
    check(cuvil_model_load_memory(pkg.data(), pkg.size(), &model_), "loading");
    cuvil_session_options so;
    cuvil_session_options_init(&so);
    so.threads = 1;
    check(cuvil_session_create(model_, &so, &session_), "starting a session for");
    for (size_t i = 0; i < cuvil_model_input_count(model_); ++i) {
      cuvil_tensor_info info;
      check(cuvil_model_input_info(model_, i, &info), "describing");
      inputs_.push_back(info.name);
    }
    for (size_t i = 0; i < cuvil_model_output_count(model_); ++i) {
      cuvil_tensor_info info;
      check(cuvil_model_output_info(model_, i, &info), "describing");
      outputs_[info.name] = i;
    }
  }
  ~PackageRunner() {
    if (session_) cuvil_session_release(session_);
    if (model_) cuvil_model_release(model_);
  }
  PackageRunner(const PackageRunner&) = delete;
  PackageRunner& operator=(const PackageRunner&) = delete;

  void run(const CalibrationSample& s, const std::vector<ModelInput>& model_inputs) {
    for (size_t k = 0; k < model_inputs.size(); ++k) {
      const tools::HostTensor& t = s.inputs[k];
      if (std::find(inputs_.begin(), inputs_.end(), model_inputs[k].name) == inputs_.end()) continue;
      cuvil_status st = cuvil_session_set_input(session_, model_inputs[k].name.c_str(), t.dtype,
                                                static_cast<int32_t>(t.dims.size()), t.dims.data(), t.bytes.data(),
                                                t.bytes.size());
      if (st) fail_run(st, s.where);
    }
    if (cuvil_status st = cuvil_session_run(session_)) fail_run(st, s.where);
  }

  // Output `name` of the last run: its dtype, data and element count (nullptr when absent).
  const void* output(const std::string& name, int32_t* dtype, int64_t* numel) {
    auto it = outputs_.find(name);
    if (it == outputs_.end()) return nullptr;
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    check(cuvil_session_get_output(session_, it->second, &info, &data, &bytes), "reading an output of");
    *dtype = info.dtype;
    const size_t es = cuvil_dtype_size(info.dtype);
    *numel = es ? static_cast<int64_t>(bytes / es) : 0;
    return data;
  }

 private:
  void check(cuvil_status st, const char* doing) {
    if (!st) return;
    std::string msg = cuvil_status_message(st);
    cuvil_status_free(st);
    CUVIL_ASSERT(false, doing << " the " << what_ << " model failed: " << msg);
  }
  [[noreturn]] void fail_run(cuvil_status st, const std::string& where) {
    std::string msg = cuvil_status_message(st);
    cuvil_status_free(st);
    fail(ExitCode::kUsage, "--calib: running the ", what_, " model on calibration ", where, " failed: ", msg);
  }

  std::string what_;
  cuvil_model* model_ = nullptr;
  cuvil_session* session_ = nullptr;
  std::vector<std::string> inputs_;
  std::map<std::string, size_t> outputs_;
};

// Runs `body` with the portable kernel path active, restoring the previous path after: the
// calibration's numbers must not depend on the compiling machine's instruction set.
template <typename F>
void on_portable_path(F&& body) {
  const rt::CpuPath before = rt::active_cpu_path();
  rt::set_cpu_path_for_testing(rt::CpuPath::Portable);
  try {
    body();
  } catch (...) {
    rt::set_cpu_path_for_testing(before);
    throw;
  }
  rt::set_cpu_path_for_testing(before);
}

// ---- Which nodes are quantizable ----------------------------------------------------------

struct Layer {
  int node = -1;  // index in graph.node()
  std::string name, op, output;
  std::vector<std::string> activations;  // float activations to quantize (no initializers)
  std::string weight, bias;              // initializers ("" = none)
  int weight_axis = -1;                  // per-channel axis, -1 = per tensor
  std::string why_not;                   // non-empty: stays float32
  bool fallback = false;                 // put back to float32 by the error threshold
  CalibrationMethod method = CalibrationMethod::kMinMax;
};

int64_t opset_of(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 1;
}

int64_t int_attr(const onnx::NodeProto& n, const char* name, int64_t dflt) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.i();
  return dflt;
}

std::vector<float> float_values(const TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  if (!t.raw_data().empty()) {
    CUVIL_ASSERT(t.raw_data().size() == v.size() * 4, "initializer '" << t.name() << "' raw size");
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
  } else {
    CUVIL_ASSERT(t.float_data_size() == n, "initializer '" << t.name() << "' float_data size");
    std::copy(t.float_data().begin(), t.float_data().end(), v.begin());
  }
  return v;
}

std::vector<Layer> find_layers(const onnx::GraphProto& g, const std::map<std::string, const TensorProto*>& inits,
                               const QuantizeOptions& o, int64_t opset) {
  std::vector<Layer> layers;
  auto usable_weight = [&](const std::string& name, std::string* why) {
    auto it = inits.find(name);
    if (it == inits.end()) return false;
    const TensorProto& t = *it->second;
    if (t.data_type() != TensorProto::FLOAT) *why = "weight '" + name + "' is not float32";
    else if (t.data_location() == TensorProto::EXTERNAL) *why = "weight '" + name + "' is stored as external data";
    else if (t.raw_data().empty() && t.float_data_size() == 0 && !t.dims().empty()) *why = "weight '" + name + "' has no data";
    return true;
  };
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    if (!(n.domain().empty() || n.domain() == "ai.onnx")) continue;
    if (n.op_type() != "MatMul" && n.op_type() != "Gemm" && n.op_type() != "Conv") continue;
    Layer l;
    l.node = i;
    l.op = n.op_type();
    l.name = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
    l.output = n.output_size() > 0 ? n.output(0) : "";
    const QuantNodeOverride* ov = o.override_for(n.name());
    l.method = ov && ov->method ? *ov->method : o.method;
    const WeightGranularity gran = ov && ov->granularity ? *ov->granularity : o.granularity;
    if (n.input_size() < 2) l.why_not = "fewer than two inputs";
    if (opset < 10) l.why_not = "opset " + std::to_string(opset) + " has no QuantizeLinear (10 or later needed)";
    if (ov && ov->exclude) l.why_not = "excluded by the config (quantize.nodes)";
    if (!l.why_not.empty()) {
      layers.push_back(l);
      continue;
    }
    if (inits.count(n.input(0))) l.why_not = "input 0 '" + n.input(0) + "' is a constant";
    else l.activations.push_back(n.input(0));
    std::string why;
    if (usable_weight(n.input(1), &why)) {
      l.weight = n.input(1);
      const TensorProto& w = *inits.at(l.weight);
      const bool per_channel = gran == WeightGranularity::kPerChannel && opset >= 13;
      if (per_channel) {
        if (l.op == "Conv" && w.dims_size() >= 3) l.weight_axis = 0;
        if (l.op == "MatMul" && w.dims_size() == 2) l.weight_axis = 1;
        if (l.op == "Gemm" && w.dims_size() == 2) l.weight_axis = int_attr(n, "transB", 0) ? 0 : 1;
      }
    } else {
      l.activations.push_back(n.input(1));  // MatMul of two activations, or Gemm/Conv with a computed weight
    }
    if (!why.empty()) l.why_not = why;
    if (n.input_size() > 2 && !n.input(2).empty() && l.op != "MatMul" && !l.weight.empty()) {
      auto it = inits.find(n.input(2));
      const TensorProto* w = inits.at(l.weight);
      const int64_t channels = w->dims_size() > 0 ? w->dims(l.op == "Gemm" && !int_attr(n, "transB", 0) ? 1 : 0) : -1;
      if (it != inits.end() && it->second->data_type() == TensorProto::FLOAT &&
          it->second->data_location() != TensorProto::EXTERNAL && it->second->dims_size() == 1 &&
          it->second->dims(0) == channels && w->dims_size() >= 2)
        l.bias = n.input(2);
    }
    layers.push_back(l);
  }
  return layers;
}

// ---- QDQ insertion ------------------------------------------------------------------------

struct ActivationQuant {
  QuantParams params;
  bool is_float = true;
};

TensorProto scalar_or_vector(const std::string& name, int32_t type, const std::vector<double>& values, bool vector) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  if (vector) t.add_dims(static_cast<int64_t>(values.size()));
  std::string raw;
  for (double v : values) {
    if (type == TensorProto::FLOAT) {
      float f = static_cast<float>(v);
      raw.append(reinterpret_cast<const char*>(&f), 4);
    } else if (type == TensorProto::INT32) {
      int32_t x = static_cast<int32_t>(v);
      raw.append(reinterpret_cast<const char*>(&x), 4);
    } else {
      const int8_t x = static_cast<int8_t>(static_cast<int32_t>(v));
      raw.push_back(static_cast<char>(x));
    }
  }
  t.set_raw_data(raw);
  return t;
}

onnx::NodeProto qdq_node(const std::string& op, const std::string& name, const std::vector<std::string>& ins,
                         const std::string& out, int axis) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (const auto& i : ins) n.add_input(i);
  n.add_output(out);
  if (axis >= 0) {
    auto* a = n.add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
  }
  return n;
}

// The QDQ model: `layers` without why_not or fallback are quantized with `acts`' parameters.
onnx::ModelProto build_qdq(const onnx::ModelProto& model, const std::vector<Layer>& layers,
                           const std::map<std::string, ActivationQuant>& acts) {
  onnx::ModelProto out = model;
  onnx::GraphProto* g = out.mutable_graph();
  std::map<std::string, const TensorProto*> inits;
  for (const auto& t : model.graph().initializer()) inits[t.name()] = &t;
  std::set<std::string> graph_inputs;
  for (const auto& i : model.graph().input()) graph_inputs.insert(i.name());

  std::vector<onnx::NodeProto> prefix;
  std::map<std::string, std::vector<onnx::NodeProto>> after_output;  // activation -> its Q, DQ
  std::map<std::string, std::string> dq_of;                           // activation or weight -> DQ output
  std::map<int, std::map<int, std::string>> rewired;                  // node -> input index -> new name
  std::set<std::string> replaced_weights;
  std::set<std::string> taken_names;
  for (const auto& t : model.graph().initializer()) taken_names.insert(t.name());

  auto quantize_activation = [&](const std::string& a) {
    if (dq_of.count(a)) return dq_of[a];
    const QuantParams& p = acts.at(a).params;
    const int32_t zp_type = p.is_signed ? TensorProto::INT8 : TensorProto::UINT8;
    *g->add_initializer() = scalar_or_vector(a + "_scale", TensorProto::FLOAT, {p.scale}, false);
    TensorProto zp = scalar_or_vector(a + "_zero_point", zp_type, {static_cast<double>(p.zero_point)}, false);
    if (!p.is_signed) zp.set_raw_data(std::string(1, static_cast<char>(static_cast<uint8_t>(p.zero_point))));
    *g->add_initializer() = zp;
    const std::string q = a + "_QuantizeLinear_Output", dq = a + "_DequantizeLinear_Output";
    std::vector<onnx::NodeProto> pair = {
        qdq_node("QuantizeLinear", a + "_QuantizeLinear", {a, a + "_scale", a + "_zero_point"}, q, -1),
        qdq_node("DequantizeLinear", a + "_DequantizeLinear", {q, a + "_scale", a + "_zero_point"}, dq, -1)};
    if (graph_inputs.count(a)) prefix.insert(prefix.end(), pair.begin(), pair.end());
    else after_output[a] = pair;
    return dq_of[a] = dq;
  };

  for (const Layer& l : layers) {
    if (!l.why_not.empty() || l.fallback) continue;
    const onnx::NodeProto& n = model.graph().node(l.node);
    for (int k = 0; k < 2 && k < n.input_size(); ++k)
      if (std::find(l.activations.begin(), l.activations.end(), n.input(k)) != l.activations.end())
        rewired[l.node][k] = quantize_activation(n.input(k));
    if (l.weight.empty()) continue;
    // Weight: s8 symmetric, one scale per output channel (or per tensor).
    const TensorProto& w = *inits.at(l.weight);
    const std::vector<float> wv = float_values(w);
    int64_t channels = 1, inner = static_cast<int64_t>(wv.size()), outer = 1;
    if (l.weight_axis >= 0) {
      channels = w.dims(l.weight_axis);
      inner = 1;
      for (int d = l.weight_axis + 1; d < w.dims_size(); ++d) inner *= w.dims(d);
      outer = static_cast<int64_t>(wv.size()) / std::max<int64_t>(1, channels * inner);
    }
    std::vector<double> absmax(static_cast<size_t>(channels), 0.0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t i = 0; i < inner; ++i)
          absmax[c] = std::max(absmax[c], std::fabs(static_cast<double>(wv[(o * channels + c) * inner + i])));
    std::vector<double> scales(absmax.size());
    for (size_t c = 0; c < absmax.size(); ++c) scales[c] = weight_scale(absmax[c]);
    // One quantized copy per (weight, axis); a second layer with another axis gets its own.
    std::string base = l.weight;
    if (dq_of.count(base + "#" + std::to_string(l.weight_axis))) {
      rewired[l.node][1] = dq_of[base + "#" + std::to_string(l.weight_axis)];
    } else {
      if (taken_names.count(base + "_quantized")) base += "_" + l.name;
      std::string raw(wv.size(), '\0');
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t i = 0; i < inner; ++i) {
            const size_t at = static_cast<size_t>((o * channels + c) * inner + i);
            const double q = std::clamp(static_cast<double>(std::nearbyint(wv[at] / static_cast<float>(scales[c]))), -127.0, 127.0);
            raw[at] = static_cast<char>(static_cast<int8_t>(q));
          }
      TensorProto qw;
      qw.set_name(base + "_quantized");
      qw.set_data_type(TensorProto::INT8);
      for (int64_t d : w.dims()) qw.add_dims(d);
      qw.set_raw_data(raw);
      *g->add_initializer() = qw;
      taken_names.insert(qw.name());
      const bool vec = l.weight_axis >= 0;
      *g->add_initializer() = scalar_or_vector(base + "_scale", TensorProto::FLOAT, scales, vec);
      *g->add_initializer() =
          scalar_or_vector(base + "_zero_point", TensorProto::INT8, std::vector<double>(scales.size(), 0.0), vec);
      const std::string dq = base + "_DequantizeLinear_Output";
      prefix.push_back(qdq_node("DequantizeLinear", base + "_DequantizeLinear",
                                {qw.name(), base + "_scale", base + "_zero_point"}, dq, l.weight_axis));
      dq_of[l.weight + "#" + std::to_string(l.weight_axis)] = dq;
      rewired[l.node][1] = dq;
    }
    replaced_weights.insert(l.weight);
    // Bias: int32 with scale x_scale * w_scale[c], zero point 0 (ONNX Runtime's form).
    if (!l.bias.empty() && !l.activations.empty() && l.activations[0] == n.input(0)) {
      const TensorProto& b = *inits.at(l.bias);
      const std::vector<float> bv = float_values(b);
      const double xs = acts.at(n.input(0)).params.scale;
      std::vector<double> bs(bv.size()), bq(bv.size());
      for (size_t c = 0; c < bv.size(); ++c) {
        bs[c] = xs * static_cast<float>(scales[scales.size() == 1 ? 0 : c]);
        bs[c] = static_cast<float>(bs[c]);
        bq[c] = std::clamp(std::nearbyint(bv[c] / bs[c]), -2147483648.0, 2147483647.0);
      }
      std::string bbase = l.bias;
      if (taken_names.count(bbase + "_quantized")) bbase += "_" + l.name;
      TensorProto qb = scalar_or_vector(bbase + "_quantized", TensorProto::INT32, bq, true);
      *g->add_initializer() = qb;
      taken_names.insert(qb.name());
      // Per-tensor weights (also every opset below 13, which has no axis) give one bias scale.
      const bool per_channel = l.weight_axis >= 0;
      if (!per_channel) bs.resize(1);
      *g->add_initializer() = scalar_or_vector(bbase + "_quantized_scale", TensorProto::FLOAT, bs, per_channel);
      *g->add_initializer() = scalar_or_vector(bbase + "_quantized_zero_point", TensorProto::INT32,
                                               std::vector<double>(bs.size(), 0.0), per_channel);
      const std::string dq = bbase + "_DequantizeLinear_Output";
      prefix.push_back(qdq_node("DequantizeLinear", bbase + "_DequantizeLinear",
                                {qb.name(), bbase + "_quantized_scale", bbase + "_quantized_zero_point"}, dq,
                                per_channel ? 0 : -1));
      rewired[l.node][2] = dq;
      replaced_weights.insert(l.bias);
    }
  }

  // Nodes in topological order: weight DQs and graph-input QDQs first, then every node followed
  // by the Q/DQ pairs of its outputs.
  g->clear_node();
  for (const auto& n : prefix) *g->add_node() = n;
  for (int i = 0; i < model.graph().node_size(); ++i) {
    onnx::NodeProto n = model.graph().node(i);
    if (auto it = rewired.find(i); it != rewired.end())
      for (const auto& [k, name] : it->second) n.set_input(k, name);
    *g->add_node() = n;
    for (const auto& o : model.graph().node(i).output())
      if (auto it = after_output.find(o); it != after_output.end())
        for (const auto& q : it->second) *g->add_node() = q;
  }
  // Float weights no node reads any more are dropped (as quantize_static does).
  std::set<std::string> used;
  for (const auto& n : g->node())
    for (const auto& i : n.input()) used.insert(i);
  for (const auto& o : g->output()) used.insert(o.name());
  auto* list = g->mutable_initializer();
  for (int i = list->size() - 1; i >= 0; --i) {
    const std::string& name = list->Get(i).name();
    if (replaced_weights.count(name) && !used.count(name) && !graph_inputs.count(name)) list->DeleteSubrange(i, 1);
  }
  // Subgraphs (If/Loop bodies) may read outer values: keep anything they name.
  return out;
}

// A copy of `model` whose outputs also include `names` (those not already outputs or inputs).
onnx::ModelProto with_outputs(const onnx::ModelProto& model, const std::vector<std::string>& names) {
  onnx::ModelProto m = model;
  std::set<std::string> have;
  for (const auto& o : m.graph().output()) have.insert(o.name());
  for (const auto& i : m.graph().input()) have.insert(i.name());
  for (const auto& n : names)
    if (have.insert(n).second) m.mutable_graph()->add_output()->set_name(n);
  return m;
}

std::vector<ModelInput> model_inputs(const onnx::GraphProto& g) {
  std::set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  std::vector<ModelInput> ins;
  for (const auto& vi : g.input()) {
    if (inits.count(vi.name())) continue;
    ModelInput in;
    in.name = vi.name();
    in.dtype = vi.type().tensor_type().elem_type();
    for (const auto& d : vi.type().tensor_type().shape().dim()) in.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    ins.push_back(in);
  }
  return ins;
}

// Running sums for the error of one layer's output over the calibration set.
struct ErrorSums {
  double signal = 0, noise = 0, dot = 0, qq = 0;
  void add(const float* f, const float* q, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double a = f[i], b = q[i];
      signal += a * a;
      noise += (a - b) * (a - b);
      dot += a * b;
      qq += b * b;
    }
  }
  void finish(LayerError* e) const {
    e->sqnr_db = noise > 0 ? (signal > 0 ? std::min(kSqnrCapDb, 10 * std::log10(signal / noise)) : -kSqnrCapDb) : kSqnrCapDb;
    e->cosine = signal > 0 && qq > 0 ? dot / std::sqrt(signal * qq) : (signal == qq ? 1.0 : 0.0);
    e->rel_l2 = signal > 0 ? std::sqrt(noise / signal) : (noise > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  }
};

const float* float_output(PackageRunner& r, const CalibrationSample& s, const std::vector<ModelInput>& ins,
                          const std::string& name, int64_t* n, bool* is_float) {
  for (size_t k = 0; k < ins.size(); ++k)
    if (ins[k].name == name) {
      *is_float = s.inputs[k].dtype == TensorProto::FLOAT;
      *n = static_cast<int64_t>(s.inputs[k].bytes.size() / 4);
      return reinterpret_cast<const float*>(s.inputs[k].bytes.data());
    }
  int32_t dtype = 0;
  const void* p = r.output(name, &dtype, n);
  CUVIL_ASSERT(p, "the calibration variant has no output '" << name << "'");
  *is_float = dtype == TensorProto::FLOAT;
  return static_cast<const float*>(p);
}

// "[=========           ] 45 of 100" for the progress line.
std::string bar(size_t done, size_t total) {
  constexpr size_t kWidth = 20;
  const size_t filled = total ? done * kWidth / total : kWidth;
  return "[" + std::string(filled, '=') + std::string(kWidth - filled, ' ') + "] " + std::to_string(done) + " of " +
         std::to_string(total);
}

}  // namespace

onnx::ModelProto read_model_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ExitCode::kIo, "cannot read '", path, "': ", std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  onnx::ModelProto m;
  if (!m.ParseFromString(ss.str())) fail(ExitCode::kInvalidModel, "'", path, "' is not an ONNX model (protobuf parse failed)");
  return m;
}

QuantizeResult quantize_model(const onnx::ModelProto& model, const QuantizeRequest& req) {
  const QuantizeOptions& o = req.options;
  auto say = [&](const std::string& s) {
    if (req.progress) req.progress(s);
  };
  QuantizeResult result;
  result.method = calibration_method_name(o.method);
  const onnx::GraphProto& g = model.graph();
  std::map<std::string, const TensorProto*> inits;
  for (const auto& t : g.initializer()) inits[t.name()] = &t;
  std::vector<Layer> layers = find_layers(g, inits, o, opset_of(model));

  // Every activation observed: the quantizable layers' inputs and outputs.
  std::vector<std::string> observed;
  std::set<std::string> seen;
  for (const Layer& l : layers) {
    if (!l.why_not.empty()) continue;
    for (const auto& a : l.activations)
      if (seen.insert(a).second) observed.push_back(a);
    if (!l.output.empty() && seen.insert(l.output).second) observed.push_back(l.output);
  }
  const std::vector<ModelInput> ins = model_inputs(g);
  say("calibration: reading " + o.calib_dir);
  const std::vector<CalibrationSample> samples = load_calibration_set(o.calib_dir, ins);
  result.samples = samples.size();

  std::map<std::string, Observer> observers;
  std::map<std::string, CalibrationMethod> method_of;
  for (const Layer& l : layers)
    for (const auto& a : l.activations) method_of.emplace(a, l.method);
  bool need_hist = false;
  for (const auto& [a, m] : method_of) need_hist |= observers[a].needs_histogram(m);
  std::map<std::string, ActivationQuant> acts;

  on_portable_path([&] {
    say("calibration: compiling the float model with " + std::to_string(observed.size()) + " observed activations");
    PackageRunner floats(with_outputs(model, observed), req, "calibration");
    const int passes = need_hist ? 2 : 1;
    for (int pass = 0; pass < passes; ++pass)
      for (size_t s = 0; s < samples.size(); ++s) {
        say("calibration" + std::string(passes > 1 ? (pass ? " (histograms)" : " (ranges)") : "") + ": samples " +
            bar(s + 1, samples.size()));
        floats.run(samples[s], ins);
        for (const std::string& a : observed) {
          int64_t n = 0;
          bool is_float = true;
          const float* x = float_output(floats, samples[s], ins, a, &n, &is_float);
          if (!is_float) {
            acts[a].is_float = false;
            continue;
          }
          if (pass == 0) observers[a].observe_range(x, n, o.ema_alpha);
          else if (method_of.count(a) && observers[a].needs_histogram(method_of[a])) observers[a].observe_histogram(x, n);
        }
      }
  });
  for (Layer& l : layers) {
    if (!l.why_not.empty()) continue;
    for (const auto& a : l.activations)
      if (!acts[a].is_float) l.why_not = "activation '" + a + "' is not float32";
    if (!l.output.empty() && !acts[l.output].is_float) l.why_not = "output '" + l.output + "' is not float32";
  }
  for (const auto& [a, m] : method_of) {
    double lo = 0, hi = 0;
    observers[a].choose_range(m, o, &lo, &hi);
    acts[a].params = activation_params(lo, hi, o.symmetric_activations);
  }

  // The error report, and once more without the layers under the threshold.
  for (int round = 0; round < 2; ++round) {
    result.qdq = build_qdq(model, layers, acts);
    std::vector<std::string> outs;
    for (const Layer& l : layers)
      if (l.why_not.empty() && !l.fallback) outs.push_back(l.output);
    std::map<std::string, ErrorSums> sums;
    on_portable_path([&] {
      say("error report: compiling the float and the quantized model");
      PackageRunner floats(with_outputs(model, outs), req, "float");
      PackageRunner quant(with_outputs(result.qdq, outs), req, "quantized");
      for (size_t s = 0; s < samples.size(); ++s) {
        say("error report: samples " + bar(s + 1, samples.size()));
        floats.run(samples[s], ins);
        quant.run(samples[s], ins);
        for (const std::string& name : outs) {
          int64_t nf = 0, nq = 0;
          int32_t tf = 0, tq = 0;
          const void* f = floats.output(name, &tf, &nf);
          const void* q = quant.output(name, &tq, &nq);
          CUVIL_ASSERT(f && q && nf == nq && tf == TensorProto::FLOAT && tq == TensorProto::FLOAT,
                       "layer output '" << name << "' differs in kind between the float and QDQ models");
          sums[name].add(static_cast<const float*>(f), static_cast<const float*>(q), nf);
        }
      }
    });
    result.layers.clear();
    bool any_fallback = false;
    for (Layer& l : layers) {
      if (!l.why_not.empty() || l.fallback) continue;
      LayerError e{l.name, l.op, l.output};
      sums[l.output].finish(&e);
      if (round == 0 && o.fallback_sqnr_db > 0 && e.sqnr_db < o.fallback_sqnr_db) {
        l.fallback = true;
        any_fallback = true;
        result.fallbacks.push_back(e);
        continue;
      }
      result.layers.push_back(e);
    }
    if (!any_fallback) break;
  }
  for (const Layer& l : layers)
    if (!l.why_not.empty()) result.not_quantized.emplace_back(l.name, l.why_not);
  return result;
}

}  // namespace cuvil::quant
