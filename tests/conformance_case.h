// The end-to-end conformance harness shared by the ONNX 1.12 suite (conformance_run_test.cpp)
// and the current-wheel suite (conformance_wheel_test.cpp): one backend case (model.onnx and its
// test_data_set_N folders) compiled to a package in memory as cuvilc does (import, passes,
// lowering, package writer), loaded through the verifying loader, run by a session, and compared
// with the expected outputs by testing::compare_tensors (rtol 1e-3, atol 1e-7, exact for
// integers and bools).
#pragma once

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "frontend/onnx_import.h"
#include "frontend/tensor_proto.h"
#include "kernel_harness.h"
#include "passes/pipeline.h"
#include "rewrite_passes.h"
#include "runtime/package.h"
#include "runtime/session.h"

namespace cuvil::conformance {

namespace fs = std::filesystem;

inline std::shared_ptr<TensorData> read_pb(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  onnx::TensorProto t;
  if (!in || !t.ParseFromIstream(&in)) return nullptr;
  return frontend::import_tensor(t, "", p.string());
}

inline std::string op_label(const Graph& g) {
  std::set<std::string> ops;
  for (const Node& n : g.nodes)
    if (n.op_type != "Constant") ops.insert(n.op_type);
  if (ops.empty()) return "Constant";
  if (ops.size() > 3) return "(model)";
  std::string s;
  for (const auto& o : ops) s += (s.empty() ? "" : "+") + o;
  return s;
}

// How a case is compiled: as cuvilc does by default, or "unfused" (every rewriting pass
// skipped, no tile kernels), the reference fused compilations must agree with.
struct CaseOptions {
  bool unfused = false;
};

// Runs every test_data_set of the case; checks against the expected outputs unless `got` is
// given, in which case each set's outputs are appended to it instead.
inline std::string run_case(const fs::path& dir, Model& m, const CaseOptions& how = {},
                     std::vector<std::shared_ptr<TensorData>>* got = nullptr) {
  PipelineOptions po;
  if (how.unfused) po.skip = test::rewrite_passes();
  run_passes(m, po);
  codegen::LowerOptions lo;
  lo.fuse_elementwise = !how.unfused;
  codegen::LoweredModel lowered = codegen::lower_model(m, lo);
  std::vector<uint8_t> bytes = codegen::build_package(m, lowered);
  std::shared_ptr<rt::LoadedPackage> pkg;
  rt::Status st = rt::LoadedPackage::open_memory(bytes.data(), bytes.size(), true, &pkg);
  if (!st.is_ok()) return "package rejected: " + st.message();
  rt::SessionOptions opt;
  opt.threads = 1;
  std::unique_ptr<rt::Session> owned;
  st = rt::Session::create(pkg, opt, &owned);
  if (!st.is_ok()) return "session: " + st.message();
  rt::Session& session = *owned;
  const rt::Program& p = pkg->program();
  int sets = 0;
  for (int s = 0;; ++s) {
    fs::path set = dir / ("test_data_set_" + std::to_string(s));
    if (!fs::exists(set)) break;
    ++sets;
    std::vector<std::shared_ptr<TensorData>> inputs;
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      auto t = read_pb(set / ("input_" + std::to_string(i) + ".pb"));
      if (!t) return "cannot read input " + std::to_string(i);
      // ONNX 1.12 stores bfloat16 test tensors as uint16 bit patterns (see kernel_harness.h).
      if (i < m.graph->inputs.size())
        testing::adopt_uint16_as_bfloat16(*t, m.graph->value(m.graph->inputs[i]));
      inputs.push_back(t);
      st = session.set_input(i, t->dtype, t->dims, t->bytes.data(), t->bytes.size());
      if (!st.is_ok()) return "set " + std::to_string(s) + ": " + st.message();
    }
    st = session.run();
    if (!st.is_ok()) return "set " + std::to_string(s) + ": run failed: " + st.message();
    for (size_t o = 0; got && o < p.outputs.size(); ++o) {
      const rt::TensorView* v = session.output(o);
      if (!v) return "output missing";
      auto t = std::make_shared<TensorData>();
      t->dtype = v->dtype;
      t->dims = v->dims;
      const auto* bytes = static_cast<const uint8_t*>(v->data);
      t->bytes.assign(bytes, bytes + v->bytes());
      got->push_back(t);
    }
    for (size_t o = 0; !got && o < p.outputs.size(); ++o) {
      auto expected = read_pb(set / ("output_" + std::to_string(o) + ".pb"));
      if (!expected) return "cannot read expected output " + std::to_string(o);
      // The output's dtype as shape inference gives it: the importer keeps no output declarations.
      if (o < m.graph->outputs.size())
        testing::adopt_uint16_as_bfloat16(*expected, m.graph->value(m.graph->outputs[o]));
      const rt::TensorView* v = session.output(o);
      if (!v) return "output missing";
      std::string diff = testing::compare_tensors(*v, *expected);
      if (!diff.empty()) return "set " + std::to_string(s) + " output " + std::to_string(o) + ": " + diff;
    }
  }
  return sets ? "" : "no test data";
}

}  // namespace cuvil::conformance
