// ONNX import: reads a ModelProto (file or bytes) into a cuvil Model.
//
// Validates everything it reads (RELIABILITY.md): file size and protobuf parse, ir_version and
// opset ranges, every TensorProto (dtype, dims, raw vs typed data, external data beneath the
// model directory), graph structure (undefined values, duplicate definitions, cycles,
// outputs never produced, subgraph nesting cap). Model-local functions are inlined at their
// call sites. Nodes whose op is not in ir/ops.def import as OpKind::Unknown; `find_unsupported`
// lists them all at once.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace cuvil::frontend {

// Supported ranges; documented in docs/cli.md.
constexpr int64_t kMaxIrVersion = 10;
constexpr int64_t kMaxDefaultOpset = 21;
constexpr int kMaxSubgraphDepth = 32;
// Nodes that inlining model-local functions may create in the whole model: a function that
// calls another twice, 30 levels deep, would otherwise turn a tiny file into 2^30 nodes.
constexpr int64_t kMaxInlinedNodes = int64_t{1} << 20;
constexpr uint64_t kProtobufLimit = (1ull << 31) - 1;

struct ImportOptions {
  // From --dim: name -> range. Applies to ONNX dim_params and generated symbols.
  std::vector<std::pair<std::string, sym::Range>> dims;
};

Model import_onnx_file(const std::string& path, const ImportOptions& options = {});
// `model_dir` anchors external data; empty means external data is an error.
Model import_onnx_bytes(std::string_view bytes, const std::string& model_dir,
                        const ImportOptions& options = {}, const std::string& display_name = "<memory>");

struct UnsupportedOp {
  std::string domain, op_type, node_name, graph_name;
};
// Every node (in all subgraphs) whose op cuvil does not know, in graph order.
std::vector<UnsupportedOp> find_unsupported(const Model& model);
// Throws Diagnostic(kUnsupported) listing all unsupported ops, grouped by op.
void check_supported(const Model& model);

// Parses a --dim value: "name=lo:hi", "name=N" (fixed), "name=lo:" (no upper bound).
std::pair<std::string, sym::Range> parse_dim_option(const std::string& text);

}  // namespace cuvil::frontend
