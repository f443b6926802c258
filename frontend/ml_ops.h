// ai.onnx.ml ops expanded at import. The tree ensembles become cuvil::DecisionForest (ir/fused_ops.h)
// with the forest as constant tables, the way a function call is inlined: TreeEnsemble (ml 5)
// and TreeEnsembleRegressor (ml 1 and 3) become one DecisionForest node;
// TreeEnsembleClassifier (ml 1 and 3) a DecisionForest node computing the class scores, then
// ArgMax and a Gather of the int64 class labels. Every ensemble encoding (per-tree node ids,
// leaves as nodes or as their own list, string or integer modes, float or double values) is
// checked and turned into one table form at compile time (child indices in range, every tree
// acyclic, targets in range, set members present), so the kernel only walks. Binarizer and
// ArrayFeatureExtractor are ops of their own (ir/ops.def). The linear models and the
// preprocessing ops become plain ONNX ops on float32: Scaler (Sub, Mul), Normalizer (MAX, L1,
// L2: a row reduction and Div), LinearRegressor (MatMul, Add), LinearClassifier (MatMul, Add,
// the binary model's (-s, s), Sigmoid or Softmax, ArgMax and a Gather of the integer labels),
// Imputer (IsNaN or Equal, Where; float imputed values for float32 X, int64 ones for int64 X),
// FeatureVectorizer (each input cut or zero-padded to its width, then Concat).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cuvil::frontend {

enum class MlExpansion {
  kNotHandled,   // not an ml op expanded here
  kExpanded,     // `out` holds the nodes computing it
  kUnsupported,  // an attribute takes it outside what cuvil computes (`why` says what)
  kInvalid,      // the node contradicts its own attributes or the spec (`why` says how)
};

// The nodes computing `node` (domain ai.onnx.ml, imported at ml opset `ml_opset`). Nodes made
// are in the default domain (at `default_opset`) and "cuvil" (opset 1); their names begin with
// `prefix`.
MlExpansion expand_ml_op(const onnx::NodeProto& node, int64_t ml_opset, int64_t default_opset,
                         const std::string& prefix, std::vector<onnx::NodeProto>* out, std::string* why);

}  // namespace cuvil::frontend
