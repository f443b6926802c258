// cuvil._cuvil: the thin nanobind layer of the Python package over libcuvil's C API
// (runtime/include/cuvil.h). It deals in plain values only: buffers travel as addresses and
// byte counts that python/cuvil/__init__.py takes from NumPy arrays it keeps alive for the
// call, so inputs are never copied and outputs are copied once, into arrays NumPy allocated.
// Every failing C call raises cuvil.CuvilError(code, message) (python/cuvil/_errors.py); the
// GIL is released while a run, an output copy or a trace write is in progress.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cuvil.h"

namespace nb = nanobind;

namespace {

struct StatusError {
  int code;
  std::string message;
};

// Throws StatusError for a failed status (and frees it).
void check(cuvil_status st) {
  if (!st) return;
  StatusError e{static_cast<int>(cuvil_status_code_of(st)), cuvil_status_message(st)};
  cuvil_status_free(st);
  throw e;
}

// (name, dtype, dims with -1 for symbolic dims, symbolic shape text)
using Info = std::tuple<std::string, int, std::vector<int64_t>, std::string>;

Info to_info(const cuvil_tensor_info& i) {
  return Info(i.name, i.dtype, std::vector<int64_t>(i.dims, i.dims + i.rank), i.shape);
}

class Model {
 public:
  explicit Model(const std::string& path) { check(cuvil_model_load_file(path.c_str(), &m_)); }
  Model(const nb::bytes& data, int) { check(cuvil_model_load_memory(data.c_str(), data.size(), &m_)); }
  ~Model() { cuvil_model_release(m_); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  std::vector<Info> inputs() const {
    std::vector<Info> out;
    for (size_t i = 0; i < cuvil_model_input_count(m_); ++i) {
      cuvil_tensor_info info;
      check(cuvil_model_input_info(m_, i, &info));
      out.push_back(to_info(info));
    }
    return out;
  }
  std::vector<Info> outputs() const {
    std::vector<Info> out;
    for (size_t i = 0; i < cuvil_model_output_count(m_); ++i) {
      cuvil_tensor_info info;
      check(cuvil_model_output_info(m_, i, &info));
      out.push_back(to_info(info));
    }
    return out;
  }
  cuvil_model* get() const { return m_; }

 private:
  cuvil_model* m_ = nullptr;
};

// One C session; `run` and the output calls that follow it are one step for the Python
// Session, which holds its own lock across them (a C session serves one thread at a time).
class Session {
 public:
  Session(Model& model, int threads, int64_t deadline_ms, int device) {
    cuvil_session_options o;
    cuvil_session_options_init(&o);
    o.threads = threads;
    o.deadline_ms = deadline_ms;
    o.device = device;
    check(cuvil_session_create(model.get(), &o, &s_));
  }
  // "cpu" or "cuda", and why `auto` did not take CUDA ("" otherwise).
  std::string device() const { return cuvil_session_device(s_) == CUVIL_DEVICE_CUDA ? "cuda" : "cpu"; }
  std::string device_note() const { return cuvil_session_device_note(s_); }
  ~Session() { cuvil_session_release(s_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Binds the inputs (borrowed: the caller keeps the arrays alive) and runs, without the GIL.
  // With `trace` non-empty the run is traced and the trace written there.
  void run(const std::vector<std::string>& names, const std::vector<int>& dtypes,
           const std::vector<std::vector<int64_t>>& dims, const std::vector<uintptr_t>& data,
           const std::vector<size_t>& bytes, const std::string& trace) {
    const size_t n = names.size();
    if (dtypes.size() != n || dims.size() != n || data.size() != n || bytes.size() != n)
      throw StatusError{CUVIL_INVALID_ARGUMENT, "internal: feed lists of different lengths"};
    nb::gil_scoped_release release;
    for (size_t i = 0; i < n; ++i)
      check(cuvil_session_set_input(s_, names[i].c_str(), dtypes[i], static_cast<int32_t>(dims[i].size()),
                                    dims[i].data(), reinterpret_cast<const void*>(data[i]), bytes[i]));
    if (trace.empty()) {
      check(cuvil_session_run(s_));
      return;
    }
    check(cuvil_session_enable_trace(s_, 1));
    cuvil_status st = cuvil_session_run(s_);
    check(cuvil_session_enable_trace(s_, 0));
    // The trace of a failed run is written too (it shows where the run stopped); the run's
    // error is the one raised.
    cuvil_status wst = cuvil_session_write_trace(s_, trace.c_str());
    check(st);
    check(wst);
  }

  // The last run's output `index`: (name, dtype, dims, shape text).
  Info output_info(size_t index) {
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    check(cuvil_session_get_output(s_, index, &info, &data, &bytes));
    return to_info(info);
  }
  void copy_output(size_t index, uintptr_t buffer, size_t capacity) {
    nb::gil_scoped_release release;
    check(cuvil_session_copy_output(s_, index, reinterpret_cast<void*>(buffer), capacity));
  }
  void cancel() { check(cuvil_session_cancel(s_)); }
  nb::dict metrics() const {
    cuvil_session_metrics m;
    check(cuvil_session_get_metrics(s_, &m));
    nb::dict d;
    d["runs"] = m.runs;
    d["failures"] = m.failures;
    d["run_ns"] = m.run_ns;
    d["arena_bytes"] = m.arena_bytes;
    d["arena_peak_bytes"] = m.arena_peak_bytes;
    d["threads"] = m.threads;
    d["bucket"] = m.bucket;
    return d;
  }

 private:
  cuvil_session* s_ = nullptr;
};

}  // namespace

NB_MODULE(_cuvil, m) {
  m.doc() = "cuvil's C API (libcuvil) for the cuvil package; use the package, not this module.";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object cls = nb::module_::import_("cuvil._errors").attr("CuvilError");
      nb::object args = nb::make_tuple(e.code, e.message);
      PyErr_SetObject(cls.ptr(), args.ptr());
    }
  });
  nb::class_<Model>(m, "Model")
      .def(nb::init<const std::string&>(), nb::arg("path"), nb::call_guard<nb::gil_scoped_release>())
      .def(nb::init<const nb::bytes&, int>(), nb::arg("data"), nb::arg("from_memory"))
      .def("inputs", &Model::inputs)
      .def("outputs", &Model::outputs);
  nb::class_<Session>(m, "Session")
      .def(nb::init<Model&, int, int64_t, int>(), nb::arg("model"), nb::arg("threads"), nb::arg("deadline_ms"),
           nb::arg("device"), nb::keep_alive<1, 2>())
      .def("device", &Session::device)
      .def("device_note", &Session::device_note)
      .def("run", &Session::run)
      .def("output_info", &Session::output_info)
      .def("copy_output", &Session::copy_output)
      .def("cancel", &Session::cancel)
      .def("metrics", &Session::metrics);
  m.def("dtype_name", [](int dtype) { return std::string(cuvil_dtype_name(dtype)); });
  m.def("cpu_path", [] { return std::string(cuvil_cpu_path()); });
  m.attr("MAX_THREADS") = CUVIL_MAX_THREADS;
}
