// W8A8 post-training quantization of an ONNX model into the standard QDQ form (what ONNX
// Runtime's quantize_static writes, so ONNX Runtime and TensorRT run it, and cuvil's own QDQ
// import compiles it). The steps, each over the ONNX ModelProto:
//   1. Calibration: a variant of the float model whose outputs also include every quantizable
//      activation (the float inputs of MatMul/Gemm/Conv and their outputs) is compiled in
//      process and run on libcuvil's portable kernel path (so the scales do not depend on the
//      machine) over every calibration sample; an Observer per activation records its range.
//   2. QDQ insertion: QuantizeLinear + DequantizeLinear on each quantized activation (u8 with
//      a zero point, or s8 symmetric), weights as s8 initializers + DequantizeLinear with
//      per-output-channel scales, biases as int32 (scale x_scale * w_scale) + DequantizeLinear.
//   3. Error report: the float and the QDQ model run side by side on the calibration set; per
//      quantized layer, SQNR, cosine and relative L2 of its output. Layers under the SQNR
//      threshold (option) go back to float32 and are listed with their error.
// Layers that cannot be quantized (a weight that is not float32, an activation that is not
// float32, an excluded node) stay float32 and are listed with why, never an error.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/symbolic.h"
#include "options/quantize_options.h"
#include "support/limits.h"

namespace cuvil::quant {

// One MatMul/Gemm/Conv node and what calibration measured at its output.
struct LayerError {
  std::string node, op, output;
  double sqnr_db = 0, cosine = 1, rel_l2 = 0;
};

struct QuantizeResult {
  onnx::ModelProto qdq;                 // the quantized model
  size_t samples = 0;                   // calibration samples run
  std::vector<LayerError> layers;       // the quantized layers of `qdq`, in graph order
  std::vector<LayerError> fallbacks;    // layers put back to float32 for their error (the error measured)
  std::vector<std::pair<std::string, std::string>> not_quantized;  // node, why
  std::string method;                   // the calibration method's name
};

struct QuantizeRequest {
  QuantizeOptions options;
  std::vector<std::pair<std::string, sym::Range>> dims;  // --dim, for compiling the variants
  CompileLimits limits;
  std::string display_name = "model.onnx";  // for messages
  std::string model_dir;                    // anchors external data ("" = none allowed)
  std::function<void(const std::string&)> progress;  // status lines; may be empty
};

// Reads an ONNX file into a ModelProto (kIo / kInvalidModel diagnostics naming the file).
onnx::ModelProto read_model_proto(const std::string& path);

// Steps 1-3. Diagnostics: calibration data problems (quant/calib_data.h), a model with no
// layer to quantize is fine (an empty report).
QuantizeResult quantize_model(const onnx::ModelProto& model, const QuantizeRequest& request);

// SQNR's value when the QDQ output equals the float output exactly (no noise).
constexpr double kSqnrCapDb = 200;

}  // namespace cuvil::quant
