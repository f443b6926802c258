// Shape-inference census over the ONNX backend test data (Debian's libonnx-testdata):
// every model must import; for the applicable ones (not training ops, not sequence/optional/
// map/string values) shape inference should give every value a fully known shape, and the
// inferred output shapes, evaluated with the symbols bound from the test inputs' dims, should
// equal the expected outputs' dims. Counts are printed and compared with the ratchet floors
// in tests/conformance/shape_floor.txt; a report of misses goes to the build directory.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "frontend/onnx_import.h"
#include "frontend/tensor_proto.h"
#include "ir/verifier.h"
#include "passes/infer_shapes.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
const char* kDataRoot = "/usr/share/libonnx-testdata/data";
const char* kSuites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

std::map<std::string, int> read_floors() {
  std::ifstream in(std::string(CUVIL_SOURCE_DIR) + "/tests/conformance/shape_floor.txt");
  std::map<std::string, int> floors;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string key;
    int value = 0;
    if (ls >> key >> value) floors[key] = value;
  }
  return floors;
}

bool read_tensor(const fs::path& p, onnx::TensorProto& t) {
  std::ifstream in(p, std::ios::binary);
  return in && t.ParseFromIstream(&in);
}

// Why a model is outside the applicable set, or "" when it is applicable.
std::string excluded_category(const Graph& g) {
  for (const Value& v : g.values)
    if (v.kind != ValueKind::Tensor || v.dtype == DType::String) return "sequence/optional/map/string";
  for (const Node& n : g.nodes) {
    if (op_flags(n.op) & kTraining) return "training";
    if (op_flags(n.op) & kRandom) return "random";
    if (op_flags(n.op) & kSequenceTypes) return "sequence/optional/map/string";
    for (const auto& [k, a] : n.attrs) {
      if (a.g) {
        auto c = excluded_category(*a.g);
        if (!c.empty()) return c;
      }
      for (const auto& sg : a.graphs) {
        auto c = excluded_category(*sg);
        if (!c.empty()) return c;
      }
    }
  }
  return "";
}

// Compares inferred graph outputs with the expected outputs of test_data_set_0.
// `input_names`: the model's graph inputs in file order (test data input_<i>.pb order).
std::string compare_outputs(const Model& m, const fs::path& case_dir,
                            const std::vector<std::string>& input_names) {
  fs::path set = case_dir / "test_data_set_0";
  if (!fs::exists(set)) return "no test data";
  const Graph& g = *m.graph;
  std::map<std::string, int64_t> binding;
  for (size_t i = 0; i < input_names.size(); ++i) {
    onnx::TensorProto t;
    if (!read_tensor(set / ("input_" + std::to_string(i) + ".pb"), t)) continue;
    ValueId id = g.find(input_names[i]);
    if (id == kNoValue) continue;
    const Value& v = g.value(id);
    if (!v.shape || static_cast<int>(v.shape->size()) != t.dims_size()) continue;
    for (int k = 0; k < t.dims_size(); ++k)
      if ((*v.shape)[k] && (*v.shape)[k]->as_symbol()) binding[*(*v.shape)[k]->as_symbol()] = t.dims(k);
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    onnx::TensorProto t;
    if (!read_tensor(set / ("output_" + std::to_string(i) + ".pb"), t)) return "unreadable expected output";
    const Value& v = g.value(g.outputs[i]);
    if (!v.shape) return "output " + v.name + ": rank unknown";
    if (static_cast<int>(v.shape->size()) != t.dims_size())
      return "output " + v.name + ": rank " + std::to_string(v.shape->size()) + " vs expected " +
             std::to_string(t.dims_size());
    for (int k = 0; k < t.dims_size(); ++k) {
      const Dim& d = (*v.shape)[k];
      if (!d) return "output " + v.name + ": dim " + std::to_string(k) + " unknown";
      auto r = sym::evaluate(*d, binding);
      if (!r.value) return "output " + v.name + ": dim " + std::to_string(k) + " = " + d->to_string() + " (" + r.error + ")";
      if (*r.value != t.dims(k))
        return "output " + v.name + ": dim " + std::to_string(k) + " = " + d->to_string() + " = " +
               std::to_string(*r.value) + ", expected " + std::to_string(t.dims(k));
    }
  }
  return "";
}

// Turns integer/bool graph inputs into constants holding test_data_set_0's values: shape
// inference then sees the shape tensors (Reshape targets, axes, pads, sizes) that ONNX node
// tests pass as inputs, as an exporter's constant-folded model would.
void freeze_integer_inputs(Model& m, const fs::path& case_dir) {
  Graph& g = *m.graph;
  std::vector<ValueId> keep;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    Value& v = g.value(g.inputs[i]);
    onnx::TensorProto t;
    bool integer = dtype_is_integer(v.dtype) || v.dtype == DType::Bool;
    if (integer && read_tensor(case_dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb"), t)) {
      auto data = frontend::import_tensor(t, "", v.name);
      if (data->numel() <= 4096) {
        v.data = data;
        v.is_initializer = true;
        Shape s;
        for (int64_t d : data->dims) s.emplace_back(DimExpr(d));
        v.shape = s;
        continue;
      }
    }
    keep.push_back(g.inputs[i]);
  }
  g.inputs = keep;
}

TEST(ConformanceShapes, BackendTestDataCensus) {
  if (!fs::exists(kDataRoot)) GTEST_SKIP() << kDataRoot << " is missing (apt-get install libonnx-testdata)";
  int imported = 0, total = 0, applicable = 0, complete = 0, match = 0, match_frozen = 0;
  std::map<std::string, int> excluded;
  std::ostringstream report;
  std::vector<fs::path> cases;
  for (const char* suite : kSuites)
    for (const auto& e : fs::directory_iterator(fs::path(kDataRoot) / suite))
      if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& dir : cases) {
    ++total;
    const std::string label = dir.parent_path().filename().string() + "/" + dir.filename().string();
    Model m;
    try {
      m = frontend::import_onnx_file((dir / "model.onnx").string());
      verify_model(m);
      ++imported;
    } catch (const std::exception& e) {
      report << "IMPORT " << label << ": " << e.what() << "\n";
      continue;
    }
    std::string category = excluded_category(*m.graph);
    try {
      infer_shapes(m);
    } catch (const std::exception& e) {
      if (category.empty()) {
        ++applicable;
        report << "INFER " << label << ": " << e.what() << "\n";
      }
      continue;
    }
    if (!category.empty()) {
      excluded[category]++;
      continue;
    }
    ++applicable;
    ShapeCoverage cov = shape_coverage(m, 3);
    if (cov.fully_known == cov.values) {
      ++complete;
    } else {
      report << "UNKNOWN " << label << ":";
      for (const auto& u : cov.unknown) report << " " << u << ";";
      report << "\n";
    }
    std::vector<std::string> input_names;
    for (ValueId id : m.graph->inputs) input_names.push_back(m.graph->value(id).name);
    std::string diff = compare_outputs(m, dir, input_names);
    if (diff.empty()) ++match;
    else report << "MISMATCH " << label << ": " << diff << "\n";
    try {
      Model frozen = frontend::import_onnx_file((dir / "model.onnx").string());
      freeze_integer_inputs(frozen, dir);
      infer_shapes(frozen);
      std::string fdiff = compare_outputs(frozen, dir, input_names);
      if (fdiff.empty()) ++match_frozen;
      else report << "MISMATCH-FROZEN " << label << ": " << fdiff << "\n";
    } catch (const std::exception& e) {
      report << "INFER-FROZEN " << label << ": " << e.what() << "\n";
    }
  }
  std::ofstream("conformance_shapes_report.txt") << report.str();
  std::printf("[census] %d/%d models imported\n", imported, total);
  std::printf("[census] applicable: %d (excluded:", applicable);
  for (const auto& [c, n] : excluded) std::printf(" %s %d;", c.c_str(), n);
  std::printf(")\n[census] every value shaped: %d/%d\n", complete, applicable);
  std::printf("[census] inferred output shapes match expected: %d/%d\n", match, applicable);
  std::printf("[census] ... with integer inputs frozen to the test values: %d/%d\n", match_frozen, applicable);
  std::printf("[census] report: %s/conformance_shapes_report.txt\n", fs::current_path().c_str());

  auto floors = read_floors();
  EXPECT_EQ(imported, total) << "every backend test model must import; see the report";
  EXPECT_GE(imported, floors["imported"]);
  EXPECT_GE(complete, floors["shapes_complete"]) << "shape coverage dropped below the ratchet";
  EXPECT_GE(match, floors["outputs_match"]) << "matching output shapes dropped below the ratchet";
  EXPECT_GE(match_frozen, floors["outputs_match_frozen"]) << "matching output shapes (frozen inputs) dropped";
}

}  // namespace
}  // namespace cuvil
