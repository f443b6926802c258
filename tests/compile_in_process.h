// Compiling a test model in-process the way `cuvilc compile` does (import -> verify ->
// run_passes -> check_supported -> lower -> build_package), for the runtime and tile tests
// that load the package through the C API. `dims` are --dim options ("batch=1:4").
#pragma once

#include <onnx/onnx_pb.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"

namespace cuvil::test {

// The imported, verified and shape-inferred model, ready to lower.
inline Model import_for_codegen(const onnx::ModelProto& m, const std::vector<std::string>& dims = {},
                                const std::string& path = "test.onnx") {
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw std::runtime_error("cannot serialize model");
  frontend::ImportOptions options;
  for (const auto& d : dims) options.dims.push_back(frontend::parse_dim_option(d));
  Model model = frontend::import_onnx_bytes(bytes, "", options, path);
  verify_model(model);
  run_passes(model);
  frontend::check_supported(model);
  return model;
}

// The package bytes; fuse = false is `--no-fusion` (only CallOps).
inline std::vector<uint8_t> compile_package(const onnx::ModelProto& m,
                                            const std::vector<std::string>& dims = {},
                                            bool fuse = true, const std::string& path = "test.onnx") {
  Model model = import_for_codegen(m, dims, path);
  codegen::LowerOptions lo;
  lo.fuse_elementwise = fuse;
  return codegen::build_package(model, codegen::lower_model(model, lo));
}

}  // namespace cuvil::test
