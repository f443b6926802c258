// What runs as op calls after lowering, per exported test model (suite RunTimeShapeWork): the
// whole compile (passes, then codegen/lower.cpp) must leave no shape arithmetic as run-time
// work. Shape values the compiler knows are expressions of its consumers: cuvil::SymbolicInts
// shape operands, Range position ids, Slice starts/ends and int64 Reshape/Unsqueeze chains are
// folded into access maps (strided loads, copy kernels, reshaped loads) and not emitted. The
// op calls left are counted by op from the lowered program's CallOp instructions and kept in
// testdata/golden/<model>.calls (CUVIL_UPDATE_GOLDEN=1 rewrites them; review the diff). The
// outputs of the same compiles are checked against ONNX Runtime by ModelReferences.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <sstream>

#include "codegen/lower.h"
#include "frontend/onnx_import.h"
#include "golden_file.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"

namespace cuvil {
namespace {

// Op calls of the lowered program (the top level and every control-flow body), by op.
std::map<std::string, int> call_ops(const std::string& model) {
  Model m = frontend::import_onnx_file(std::string(CUVIL_SOURCE_DIR) + "/testdata/models/" + model + ".onnx");
  verify_model(m);
  run_passes(m);
  frontend::check_supported(m);
  const codegen::LoweredModel lowered = codegen::lower_model(m);
  const rt::Program& p = lowered.program;
  std::map<std::string, int> calls;
  for (size_t pc = 0; pc < p.code.size();) {
    const auto op = static_cast<rt::Opcode>(p.code[pc]);
    if (op == rt::Opcode::CallOp) {
      const rt::NodeRecord& n = p.nodes.at(p.code.at(pc + 1));
      calls[(n.domain.empty() ? "" : n.domain + "::") + n.op_type]++;
    }
    pc += 1 + std::strlen(rt::opcode_operands(op));
  }
  int total = 0;
  for (const auto& [op, count] : calls) total += count;
  EXPECT_EQ(total, lowered.call_ops) << model << ": CallOps in the code vs the lowering's count";
  return calls;
}

std::string text(const std::map<std::string, int>& calls) {
  std::ostringstream os;
  for (const auto& [op, count] : calls) os << op << " " << count << "\n";
  return os.str();
}

// Ops that only compute or move shapes (or, for Gather over a Range, position ids): none may
// remain as an op call.
void expect_no_shape_work(const std::string& model, const std::map<std::string, int>& calls) {
  for (const char* op : {"cuvil::SymbolicInts", "Shape", "Size", "Range", "Slice", "Reshape", "Flatten", "Squeeze",
                         "Unsqueeze", "Concat", "ConstantOfShape", "Expand", "Constant", "Cast"})
    EXPECT_EQ(calls.count(op), 0u) << model << ": " << op << " is still run-time work:\n" << text(calls);
}

void check(const std::string& model) {
  const std::map<std::string, int> calls = call_ops(model);
  expect_no_shape_work(model, calls);
  test::check_golden_file("testdata/golden/" + model + ".calls", text(calls));
}

TEST(RunTimeShapeWork, BertTiny) {
  check("bert_tiny");
  // The embeddings: word and token-type ids are data; the position ids (a Slice of a weight
  // holding 0..127) are a strided load of the position table.
  EXPECT_EQ(call_ops("bert_tiny")["Gather"], 3) << "word, token type and the pooler's [CLS] row";
}
TEST(RunTimeShapeWork, BertTinyOpset14) { check("bert_tiny_opset14"); }
TEST(RunTimeShapeWork, BertTinyOpset17) { check("bert_tiny_opset17"); }
TEST(RunTimeShapeWork, Gpt2Tiny) {
  check("gpt2_tiny");
  EXPECT_EQ(call_ops("gpt2_tiny")["Gather"], 1) << "only the token embedding; positions are a strided load";
}
TEST(RunTimeShapeWork, Gpt2TinyPast) { check("gpt2_tiny_past"); }
TEST(RunTimeShapeWork, LlamaTiny) {
  check("llama_tiny");
  EXPECT_EQ(call_ops("llama_tiny")["Gather"], 1) << "only the token embedding; the rotary tables are strided loads";
}
TEST(RunTimeShapeWork, Resnet18) { check("resnet18"); }
TEST(RunTimeShapeWork, MobilenetV2Tiny) { check("mobilenet_v2_tiny"); }

}  // namespace
}  // namespace cuvil
