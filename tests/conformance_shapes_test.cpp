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
std::string compare_outputs(const Model& m, const fs::path& case_dir) {
  fs::path set = case_dir / "test_data_set_0";
  if (!fs::exists(set)) return "no test data";
  const Graph& g = *m.graph;
  std::map<std::string, int64_t> binding;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    onnx::TensorProto t;
    if (!read_tensor(set / ("input_" + std::to_string(i) + ".pb"), t)) continue;
    const Value& v = g.value(g.inputs[i]);
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

TEST(ConformanceShapes, BackendTestDataCensus) {
  if (!fs::exists(kDataRoot)) GTEST_SKIP() << kDataRoot << " is missing (apt-get install libonnx-testdata)";
  int imported = 0, total = 0, applicable = 0, complete = 0, match = 0;
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
    std::string diff = compare_outputs(m, dir);
    if (diff.empty()) ++match;
    else report << "MISMATCH " << label << ": " << diff << "\n";
  }
  std::ofstream("conformance_shapes_report.txt") << report.str();
  std::printf("[census] %d/%d models imported\n", imported, total);
  std::printf("[census] applicable: %d (excluded:", applicable);
  for (const auto& [c, n] : excluded) std::printf(" %s %d;", c.c_str(), n);
  std::printf(")\n[census] every value shaped: %d/%d\n", complete, applicable);
  std::printf("[census] inferred output shapes match expected: %d/%d\n", match, applicable);
  std::printf("[census] report: %s/conformance_shapes_report.txt\n", fs::current_path().c_str());

  auto floors = read_floors();
  EXPECT_EQ(imported, total) << "every backend test model must import; see the report";
  EXPECT_GE(imported, floors["imported"]);
  EXPECT_GE(complete, floors["shapes_complete"]) << "shape coverage dropped below the ratchet";
  EXPECT_GE(match, floors["outputs_match"]) << "matching output shapes dropped below the ratchet";
}

}  // namespace
}  // namespace cuvil
