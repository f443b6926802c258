// Whole-tensor kernels against the ONNX backend node tests, without the compiler: every
// single-node case of /usr/share/libonnx-testdata/data/node runs its op's kernel on each
// test_data_set and compares with the expected outputs (rtol 1e-3, atol 1e-7; exact for
// integers and bools). Prints `N passed, M failed, K without kernel` and writes a report of
// failures grouped by op to kernel_conformance_report.txt. The count of passing cases is a
// ratchet (tests/conformance/kernel_floor.txt). CUVIL_KERNEL_CASES=substring limits the run.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "frontend/onnx_import.h"
#include "frontend/tensor_proto.h"
#include "kernel_harness.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
const char* kNodeDir = "/usr/share/libonnx-testdata/data/node";

std::shared_ptr<TensorData> read_pb(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  onnx::TensorProto t;
  if (!in || !t.ParseFromIstream(&in)) return nullptr;
  return frontend::import_tensor(t, "", p.string());
}

int read_floor() {
  std::ifstream in(std::string(CUVIL_SOURCE_DIR) + "/tests/conformance/kernel_floor.txt");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') return std::atoi(line.c_str());
  return 0;
}

// The dtype and shape graph output o of the model file declares. The importer keeps only the
// declarations of inputs (outputs get theirs from shape inference, which this test skips).
std::pair<DType, std::optional<Shape>> declared_output(const onnx::ModelProto& mp, size_t o) {
  if (o >= static_cast<size_t>(mp.graph().output_size())) return {DType::Undefined, std::nullopt};
  const onnx::TypeProto& type = mp.graph().output(static_cast<int>(o)).type();
  if (!type.has_tensor_type()) return {DType::Undefined, std::nullopt};
  auto dtype = dtype_from_onnx(type.tensor_type().elem_type());
  std::optional<Shape> shape;
  if (type.tensor_type().has_shape()) {
    shape.emplace();
    for (const auto& d : type.tensor_type().shape().dim())
      shape->push_back(d.has_dim_value() ? Dim(DimExpr(d.dim_value())) : Dim());
  }
  return {dtype.value_or(DType::Undefined), shape};
}

// Runs one single-node case; returns "" on success, "no kernel" or a failure description.
std::string run_case(const fs::path& dir, const Model& m) {
  const Graph& g = *m.graph;
  const Node& node = g.nodes[0];
  rt::OpKernelFn fn = rt::find_op_kernel(node.domain, node.op_type);
  if (!fn) return "no kernel";
  onnx::ModelProto model_proto;
  {
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    if (!in || !model_proto.ParseFromIstream(&in)) return "cannot reparse model.onnx";
  }
  int sets = 0;
  for (int s = 0;; ++s) {
    fs::path set = dir / ("test_data_set_" + std::to_string(s));
    if (!fs::exists(set)) break;
    ++sets;
    std::vector<std::shared_ptr<TensorData>> graph_inputs;
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      auto t = read_pb(set / ("input_" + std::to_string(i) + ".pb"));
      if (!t) return "cannot read input " + std::to_string(i);
      testing::adopt_uint16_as_bfloat16(*t, g.value(g.inputs[i]));  // ONNX 1.12 quirk
      graph_inputs.push_back(t);
    }
    std::vector<rt::TensorView> views;
    views.reserve(node.inputs.size());
    std::vector<const rt::TensorView*> inputs;
    for (ValueId id : node.inputs) {
      if (id == kNoValue) {
        inputs.push_back(nullptr);
        continue;
      }
      const Value& v = g.value(id);
      std::shared_ptr<const TensorData> data = v.data;
      for (size_t i = 0; i < g.inputs.size(); ++i)
        if (g.inputs[i] == id) data = graph_inputs[i];
      if (!data) return "input '" + v.name + "' has no data";
      views.push_back(testing::view_of(*data));
      inputs.push_back(&views.back());
    }
    testing::HeapOpContext ctx(node, inputs, node.outputs.size());
    rt::Status st = fn(ctx);
    if (!st.is_ok()) return "set " + std::to_string(s) + ": kernel error: " + st.message();
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      auto expected = read_pb(set / ("output_" + std::to_string(o) + ".pb"));
      if (!expected) return "cannot read expected output " + std::to_string(o);
      auto [out_dtype, out_shape] = declared_output(model_proto, o);
      testing::adopt_uint16_as_bfloat16(*expected, out_dtype, out_shape);
      size_t slot = std::find(node.outputs.begin(), node.outputs.end(), g.outputs[o]) - node.outputs.begin();
      if (slot >= node.outputs.size()) return "graph output is not a node output";
      std::string diff = testing::compare_tensors(ctx.output(slot), *expected);
      if (!diff.empty()) return "set " + std::to_string(s) + " output " + std::to_string(o) + ": " + diff;
    }
  }
  return sets ? "" : "no test data";
}

TEST(KernelConformance, SingleNodeBackendCases) {
  if (!fs::exists(kNodeDir)) GTEST_SKIP() << kNodeDir << " is missing (apt-get install libonnx-testdata)";
  const char* filter = std::getenv("CUVIL_KERNEL_CASES");
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(kNodeDir))
    if (!filter || e.path().filename().string().find(filter) != std::string::npos) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int passed = 0, failed = 0, no_kernel = 0, skipped = 0;
  std::map<std::string, std::vector<std::string>> failures;  // op -> "case: why"
  for (const fs::path& dir : cases) {
    Model m;
    try {
      m = frontend::import_onnx_file((dir / "model.onnx").string());
    } catch (const std::exception& e) {
      ++skipped;
      continue;
    }
    const Graph& g = *m.graph;
    bool single = g.nodes.size() == 1 && !(op_flags(g.nodes[0].op) & (kTraining | kRandom | kSequenceTypes));
    for (const Value& v : g.values) single = single && v.kind == ValueKind::Tensor && v.dtype != DType::String;
    if (!single) {
      ++skipped;
      continue;
    }
    std::string why;
    try {
      why = run_case(dir, m);
    } catch (const std::exception& e) {
      why = std::string("exception: ") + e.what();
    }
    if (why.empty()) {
      ++passed;
    } else if (why == "no kernel") {
      ++no_kernel;
      failures[g.nodes[0].op_type].push_back(dir.filename().string() + ": no kernel");
    } else {
      ++failed;
      failures[g.nodes[0].op_type].push_back(dir.filename().string() + ": " + why);
    }
  }
  std::ofstream report("kernel_conformance_report.txt");
  for (const auto& [op, list] : failures) {
    report << op << " (" << list.size() << ")\n";
    for (const auto& l : list) report << "  " << l << "\n";
  }
  std::printf("[kernels] %d passed, %d failed, %d without kernel (%d multi-node/excluded cases skipped)\n",
              passed, failed, no_kernel, skipped);
  std::printf("[kernels] report: %s/kernel_conformance_report.txt\n", fs::current_path().c_str());
  if (!filter) {
    EXPECT_GE(passed, read_floor()) << "kernel conformance dropped below the ratchet";
  }
}

}  // namespace
}  // namespace cuvil
