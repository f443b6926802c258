// ONNX import: reads a ModelProto (file or bytes) into a cuvil Model.
//
// Validates everything it reads (RELIABILITY.md): file size and protobuf parse, ir_version and
// opset ranges, every TensorProto (dtype, dims, raw vs typed data, external data beneath the
// model directory), graph structure (undefined values, duplicate definitions, cycles,
// outputs never produced). Model-local functions are inlined at their call sites. Nodes whose
// op is not in ir/ops.def import as OpKind::Unknown; `find_unsupported` lists them all at once.
// The resource caps of ImportOptions::limits (support/limits.def: nodes, inlined nodes and
// bytes, nesting depth, tensor elements) are enforced while reading: the node count and nesting
// depth by a scan of the protobuf wire format before the model is parsed at all, so a file of
// ten million nodes is refused without building them in memory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "support/limits.h"

namespace cuvil::frontend {

// Supported ranges; documented in docs/cli.md.
constexpr int64_t kMaxIrVersion = 14;
constexpr int64_t kMaxDefaultOpset = 28;
constexpr uint64_t kProtobufLimit = (1ull << 31) - 1;

struct ImportOptions {
  // From --dim: name -> range. Applies to ONNX dim_params and generated symbols.
  std::vector<std::pair<std::string, sym::Range>> dims;
  // Caps on the work the model may ask for (--max-*, limits.* in a config file).
  CompileLimits limits;
};

// Counts of a serialized ModelProto read from its wire format without parsing it: NodeProtos
// in the graph, its subgraphs and the model-local functions (before inlining), and the deepest
// subgraph nesting. Cheap in memory (no message is built), so it runs before the parse.
struct WireCounts {
  int64_t nodes = 0;
  int depth = 0;
};
// Fails with limit_exceeded as soon as a count passes its cap; Diagnostic(kInvalidModel) when
// the bytes are not well-formed protobuf.
WireCounts scan_model_wire(std::string_view bytes, const CompileLimits& limits,
                           const std::string& display_name);

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
