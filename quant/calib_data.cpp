// Reading and checking calibration samples (quant/calib_data.h).
#include "quant/calib_data.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/include/cuvil.h"
#include "support/checked.h"
#include "support/error.h"

namespace cuvil::quant {
namespace {

bool is_dir(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + (dims[i] < 0 ? std::string("?") : std::to_string(dims[i]));
  return s + "]";
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The entries of `dir` (no "." and ".."), sorted; sample folders numerically when all are numbers.
std::vector<std::string> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) fail(ExitCode::kIo, "--calib: cannot read the calibration directory '", dir, "': ", std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Checks `t` (read from `file`) against `in` with `lead` extra leading dims.
void check_fits(const tools::HostTensor& t, const ModelInput& in, const std::string& file, size_t lead,
                const std::string& layout_hint) {
  bool ok = t.dtype == in.dtype && t.dims.size() == in.dims.size() + lead;
  for (size_t i = 0; ok && i < in.dims.size(); ++i)
    if (in.dims[i] >= 0 && t.dims[i + lead] != in.dims[i]) ok = false;
  if (!ok)
    fail(ExitCode::kUsage, "--calib: calibration file '", file, "' does not fit model input '", in.name,
         "': expected ", layout_hint, describe_input(in), ", got ", describe_tensor(t));
}

// NaN/Inf in a float sample is refused: it would poison every range it reaches.
void check_finite(const tools::HostTensor& t, const std::string& input, const std::string& file,
                  const std::string& where) {
  if (t.dtype != 1) return;  // only float32 inputs are observed as floats
  const size_t n = t.bytes.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, t.bytes.data() + 4 * i, 4);
    if (!std::isfinite(v))
      fail(ExitCode::kUsage, "--calib: ", where, " of input '", input, "' (file '", file, "') holds ",
           std::isnan(v) ? "NaN" : "Inf", " at element ", i, "; calibration data must be finite");
  }
}

tools::HostTensor read_checked(const std::string& file) {
  tools::HostTensor t;
  std::string err = tools::read_npy(file, &t);
  if (!err.empty()) fail(ExitCode::kUsage, "--calib: ", err);
  return t;
}

}  // namespace

std::string describe_tensor(const tools::HostTensor& t) {
  return std::string(cuvil_dtype_name(t.dtype)) + " " + dims_text(t.dims);
}
std::string describe_input(const ModelInput& in) { return std::string(cuvil_dtype_name(in.dtype)) + " " + dims_text(in.dims); }

std::vector<CalibrationSample> load_calibration_set(const std::string& dir, const std::vector<ModelInput>& inputs) {
  if (!is_dir(dir)) fail(ExitCode::kIo, "--calib: '", dir, "' is not a readable directory");
  const std::vector<std::string> names = list_dir(dir);
  std::vector<CalibrationSample> samples;
  const bool stacked = std::any_of(inputs.begin(), inputs.end(), [&](const ModelInput& in) {
    return is_file(dir + "/" + in.name + ".npy");
  });
  if (stacked) {
    // One file per input with a leading sample axis. A file of the input's own rank is taken as
    // samples of batch 1 along its first axis (x[i:i+1]), so a batch of images can be used as is.
    size_t count = 0;
    std::string count_file;
    std::vector<tools::HostTensor> files;
    std::vector<bool> keep_axis;
    for (const ModelInput& in : inputs) {
      const std::string file = dir + "/" + in.name + ".npy";
      if (!is_file(file))
        fail(ExitCode::kUsage, "--calib: the calibration directory '", dir, "' has no file for model input '",
             in.name, "' (expected '", file, "', as for the other inputs)");
      tools::HostTensor t = read_checked(file);
      const bool batch_of_one = t.dims.size() == in.dims.size() && !in.dims.empty() && in.dims[0] < 0;
      if (!batch_of_one) check_fits(t, in, file, 1, "a leading sample axis before ");
      else check_fits(t, in, file, 0, "");
      const size_t n = t.dims.empty() ? 0 : static_cast<size_t>(t.dims[0]);
      if (files.empty()) {
        count = n;
        count_file = file;
      } else if (n != count) {
        fail(ExitCode::kUsage, "--calib: '", file, "' holds ", n, " samples but '", count_file, "' holds ", count,
             "; every input needs the same number");
      }
      files.push_back(std::move(t));
      keep_axis.push_back(batch_of_one);
    }
    if (count == 0) fail(ExitCode::kUsage, "--calib: the calibration files in '", dir, "' hold no samples (leading axis 0)");
    samples.resize(count);
    for (size_t s = 0; s < count; ++s) {
      samples[s].where = "sample " + std::to_string(s);
      for (size_t k = 0; k < inputs.size(); ++k) {
        const tools::HostTensor& t = files[k];
        tools::HostTensor slice;
        slice.dtype = t.dtype;
        slice.dims.assign(t.dims.begin() + 1, t.dims.end());
        if (keep_axis[k]) slice.dims.insert(slice.dims.begin(), 1);
        const size_t bytes = t.bytes.size() / count;
        slice.bytes.assign(t.bytes.begin() + s * bytes, t.bytes.begin() + (s + 1) * bytes);
        check_finite(slice, inputs[k].name, dir + "/" + inputs[k].name + ".npy", samples[s].where);
        samples[s].inputs.push_back(std::move(slice));
      }
    }
    return samples;
  }
  std::vector<std::string> folders;
  for (const std::string& n : names)
    if (is_dir(dir + "/" + n)) folders.push_back(n);
  if (folders.empty()) {
    std::string expected;
    for (const ModelInput& in : inputs) expected += (expected.empty() ? "" : ", ") + in.name + ".npy";
    fail(ExitCode::kUsage, "--calib: the calibration directory '", dir, "' is empty: expected ", expected,
         " (a leading sample axis) or sample folders '", dir, "/<n>/' holding them");
  }
  if (std::all_of(folders.begin(), folders.end(), all_digits))
    std::stable_sort(folders.begin(), folders.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
  for (const std::string& f : folders) {
    CalibrationSample s;
    s.where = "sample folder '" + dir + "/" + f + "'";
    for (const ModelInput& in : inputs) {
      const std::string file = dir + "/" + f + "/" + in.name + ".npy";
      if (!is_file(file))
        fail(ExitCode::kUsage, "--calib: ", s.where, " has no file for model input '", in.name, "' (expected '",
             file, "')");
      tools::HostTensor t = read_checked(file);
      check_fits(t, in, file, 0, "");
      check_finite(t, in.name, file, s.where);
      s.inputs.push_back(std::move(t));
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace cuvil::quant
