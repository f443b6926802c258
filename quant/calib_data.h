// Calibration data for W8A8 quantization (`--calib DIR`): reads and checks every sample before
// anything runs. DIR holds either `<input>.npy` per model input with a leading sample axis
// (sample i is slice i, in index order, the order EMA sees), or sample folders
// `DIR/<n>/<input>.npy` taken in sorted order (numerically when every folder name is a number).
// Every problem is a diagnostic naming the directory, input and file: a missing file, a dtype
// or shape that does not fit the model's input (expected and got), NaN/Inf (the sample and
// element), sample counts that differ between inputs, an empty DIR.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli/npy.h"

namespace cuvil::quant {

// A model input as the calibration reader checks it: ONNX dtype, dims (-1 where symbolic).
struct ModelInput {
  std::string name;
  int32_t dtype = 1;
  std::vector<int64_t> dims;
};

// One sample: a tensor per model input, in the model's input order.
struct CalibrationSample {
  std::string where;  // "sample 3" or "sample folder 'DIR/3'", for messages
  std::vector<tools::HostTensor> inputs;
};

// Reads DIR (Diagnostics: kIo when unreadable, kUsage for content that does not fit `inputs`).
std::vector<CalibrationSample> load_calibration_set(const std::string& dir, const std::vector<ModelInput>& inputs);

// "f32 [batch, 1, 8, 8]"-style text for messages.
std::string describe_input(const ModelInput& in);
std::string describe_tensor(const tools::HostTensor& t);

}  // namespace cuvil::quant
