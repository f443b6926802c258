// The C API (runtime/include/cuvil.h) over the C++ runtime. No exception crosses it: every
// entry point catches everything and returns a status.
#include "cuvil.h"

#include <unistd.h>

#include <cerrno>
#include <cfenv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_features.h"
#include "runtime/expr_eval.h"
#include "runtime/package.h"
#include "runtime/session.h"

struct cuvil_status_s {
  cuvil_status_code code;
  std::string message;
};

struct cuvil_model_s {
  std::shared_ptr<const cuvil::rt::LoadedPackage> package;
  struct Info {
    std::string name, shape;
    cuvil_tensor_info info;
  };
  std::vector<Info> inputs, outputs;
  std::vector<cuvil_state_info> states;
};

struct cuvil_session_s {
  std::unique_ptr<cuvil::rt::Session> session;
  std::vector<std::string> output_shapes;
  std::string state_shape;  // cuvil_session_read_state's info.shape
  bool trace_enabled_once = false;  // cuvil_session_write_trace has something to write
};

namespace {

using cuvil::rt::Status;
using cuvil::rt::StatusCode;

// Returned when even a status cannot be allocated (NULL would read as success). Never
// freed; its message fits the small-string buffer, so it owns no heap memory.
cuvil_status_s g_out_of_memory{CUVIL_OUT_OF_MEMORY, "out of memory"};

cuvil_status make(cuvil_status_code code, std::string message) {
  auto* s = new (std::nothrow) cuvil_status_s{code, std::move(message)};
  return s ? s : &g_out_of_memory;
}

static_assert(CUVIL_MAX_THREADS == cuvil::rt::kMaxSessionThreads, "one thread cap");
static_assert(CUVIL_CANCELLED == static_cast<int>(StatusCode::kCancelled) &&
                  CUVIL_DEADLINE == static_cast<int>(StatusCode::kDeadline),
              "status codes match runtime/status.h");

cuvil_status from(const Status& st) {
  if (st.is_ok()) return nullptr;
  return make(static_cast<cuvil_status_code>(st.code()), st.message());
}

template <typename Fn>
cuvil_status guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return &g_out_of_memory;
  } catch (const std::exception& e) {
    try {
      return make(CUVIL_RUNTIME, std::string("internal error: ") + e.what());
    } catch (...) {
      return &g_out_of_memory;
    }
  } catch (...) {
    return make(CUVIL_RUNTIME, "internal error");
  }
}

// The runtime computes in the default floating-point environment (round to nearest,
// denormals kept, exceptions masked), whatever the caller has set, and gives the caller its
// own environment back, sticky exception flags included (RELIABILITY.md: "the caller's
// floating-point state is left unchanged"). Session creation runs under it too, because the
// worker threads inherit the environment of the thread that creates them.
class DefaultFloatEnvironment {
 public:
  DefaultFloatEnvironment() : saved_ok_(std::fegetenv(&saved_) == 0) { std::fesetenv(FE_DFL_ENV); }
  ~DefaultFloatEnvironment() {
    if (saved_ok_) std::fesetenv(&saved_);
  }
  DefaultFloatEnvironment(const DefaultFloatEnvironment&) = delete;
  DefaultFloatEnvironment& operator=(const DefaultFloatEnvironment&) = delete;

 private:
  std::fenv_t saved_;
  bool saved_ok_;
};

void describe(const cuvil::rt::Program& p, uint32_t t, cuvil_model_s::Info& out) {
  const cuvil::rt::TensorDesc& d = p.tensors[t];
  out.name = d.name;
  out.shape = "[";
  std::memset(&out.info, 0, sizeof out.info);
  out.info.dtype = static_cast<cuvil_dtype>(d.dtype);
  out.info.rank = static_cast<int32_t>(d.dims.size());
  for (size_t k = 0; k < d.dims.size(); ++k) {
    std::string text = cuvil::rt::expr_to_string(p, d.dims[k]);
    out.shape += (k ? ", " : "") + text;
    if (k < CUVIL_MAX_RANK) {
      const cuvil::rt::ExprRange& r = p.exprs[d.dims[k]];
      bool constant = r.count == 1 && p.expr_code[r.begin].kind == cuvil::rt::ExprOpKind::kConst;
      out.info.dims[k] = constant ? p.expr_code[r.begin].value : -1;
    }
  }
  out.shape += "]";
}

cuvil_status finish_load(std::shared_ptr<cuvil::rt::LoadedPackage> pkg, cuvil_model** out_model) {
  auto m = std::make_unique<cuvil_model_s>();
  m->package = std::move(pkg);
  const cuvil::rt::Program& p = m->package->program();
  for (uint32_t t : p.inputs) {
    if (p.tensors[t].dims.size() > CUVIL_MAX_RANK)
      return make(CUVIL_UNSUPPORTED, "input '" + p.tensors[t].name + "' has rank above CUVIL_MAX_RANK");
    m->inputs.emplace_back();
    describe(p, t, m->inputs.back());
  }
  for (uint32_t t : p.outputs) {
    if (p.tensors[t].dims.size() > CUVIL_MAX_RANK)
      return make(CUVIL_UNSUPPORTED, "output '" + p.tensors[t].name + "' has rank above CUVIL_MAX_RANK");
    m->outputs.emplace_back();
    describe(p, t, m->outputs.back());
  }
  for (auto* list : {&m->inputs, &m->outputs})
    for (auto& i : *list) {
      i.info.name = i.name.c_str();
      i.info.shape = i.shape.c_str();
    }
  for (const cuvil::rt::StateRecord& r : m->package->states()) {  // verified at load
    cuvil_state_info s;
    std::memset(&s, 0, sizeof s);
    s.name = m->inputs[r.input].name.c_str();
    s.output = m->outputs[r.output].name.c_str();
    s.input_index = r.input;
    s.output_index = r.output;
    s.dtype = static_cast<cuvil_dtype>(r.dtype);
    s.rank = static_cast<int32_t>(r.max_dims.size());
    s.axis = static_cast<int32_t>(r.axis);
    for (size_t k = 0; k < r.max_dims.size() && k < CUVIL_MAX_RANK; ++k) s.max_dims[k] = r.max_dims[k];
    s.length_symbol = p.symbols[r.symbol].name.c_str();
    m->states.push_back(s);
  }
  *out_model = m.release();
  return nullptr;
}

}  // namespace

extern "C" {

cuvil_status_code cuvil_status_code_of(cuvil_status status) { return status ? status->code : CUVIL_OK; }
const char* cuvil_status_message(cuvil_status status) { return status ? status->message.c_str() : ""; }
void cuvil_status_free(cuvil_status status) {
  if (status != &g_out_of_memory) delete status;
}

const char* cuvil_dtype_name(cuvil_dtype dtype) {
  return cuvil::dtype_name(static_cast<cuvil::DType>(dtype));
}
size_t cuvil_dtype_size(cuvil_dtype dtype) {
  int bits = cuvil::dtype_bits(static_cast<cuvil::DType>(dtype));
  return bits % 8 == 0 ? static_cast<size_t>(bits / 8) : 0;
}

cuvil_status cuvil_model_load_file(const char* path, cuvil_model** out_model) {
  if (!path || !out_model) return make(CUVIL_INVALID_ARGUMENT, "cuvil_model_load_file: null argument");
  *out_model = nullptr;
  return guarded([&]() -> cuvil_status {
    std::shared_ptr<cuvil::rt::LoadedPackage> pkg;
    Status st = cuvil::rt::LoadedPackage::open_file(path, &pkg);
    if (!st.is_ok()) return from(st);
    return finish_load(std::move(pkg), out_model);
  });
}

cuvil_status cuvil_model_load_memory(const void* data, size_t size, cuvil_model** out_model) {
  if (!out_model || (!data && size)) return make(CUVIL_INVALID_ARGUMENT, "cuvil_model_load_memory: null argument");
  *out_model = nullptr;
  return guarded([&]() -> cuvil_status {
    std::shared_ptr<cuvil::rt::LoadedPackage> pkg;
    Status st = cuvil::rt::LoadedPackage::open_memory(data, size, /*copy=*/true, &pkg);
    if (!st.is_ok()) return from(st);
    return finish_load(std::move(pkg), out_model);
  });
}

void cuvil_model_release(cuvil_model* model) { delete model; }

size_t cuvil_model_input_count(const cuvil_model* model) { return model ? model->inputs.size() : 0; }
size_t cuvil_model_output_count(const cuvil_model* model) { return model ? model->outputs.size() : 0; }

cuvil_status cuvil_model_input_info(const cuvil_model* model, size_t index, cuvil_tensor_info* out_info) {
  if (!model || !out_info) return make(CUVIL_INVALID_ARGUMENT, "cuvil_model_input_info: null argument");
  if (index >= model->inputs.size())
    return make(CUVIL_INVALID_ARGUMENT, "input index " + std::to_string(index) + " out of range (model has " +
                                            std::to_string(model->inputs.size()) + ")");
  *out_info = model->inputs[index].info;
  return nullptr;
}

cuvil_status cuvil_model_output_info(const cuvil_model* model, size_t index, cuvil_tensor_info* out_info) {
  if (!model || !out_info) return make(CUVIL_INVALID_ARGUMENT, "cuvil_model_output_info: null argument");
  if (index >= model->outputs.size())
    return make(CUVIL_INVALID_ARGUMENT, "output index " + std::to_string(index) + " out of range (model has " +
                                            std::to_string(model->outputs.size()) + ")");
  *out_info = model->outputs[index].info;
  return nullptr;
}

void cuvil_session_options_init(cuvil_session_options* options) {
  if (!options) return;
  options->threads = 0;
  options->deadline_ms = 0;
  options->device = CUVIL_DEVICE_CPU;
}

cuvil_status cuvil_session_create(cuvil_model* model, const cuvil_session_options* options,
                                  cuvil_session** out_session) {
  if (!model || !out_session) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_create: null argument");
  *out_session = nullptr;
  return guarded([&]() -> cuvil_status {
    cuvil::rt::SessionOptions o;
    if (options) {
      if (options->threads < 0 || options->deadline_ms < 0)
        return make(CUVIL_INVALID_ARGUMENT, "session options: threads and deadline_ms must be >= 0");
      if (options->device < CUVIL_DEVICE_CPU || options->device > CUVIL_DEVICE_AUTO)
        return make(CUVIL_INVALID_ARGUMENT, "session options: device = " + std::to_string(options->device) +
                                                " is not a cuvil_device (0 cpu, 1 cuda, 2 auto)");
      o.threads = options->threads;
      o.deadline_ms = options->deadline_ms;
      o.device = static_cast<cuvil::rt::Device>(options->device);
    }
    auto s = std::make_unique<cuvil_session_s>();
    DefaultFloatEnvironment fenv;
    if (Status st = cuvil::rt::Session::create(model->package, o, &s->session); !st.is_ok()) return from(st);
    *out_session = s.release();
    return nullptr;
  });
}

void cuvil_session_release(cuvil_session* session) { delete session; }

cuvil_device cuvil_session_device(const cuvil_session* session) {
  if (!session) return CUVIL_DEVICE_CPU;
  return static_cast<cuvil_device>(session->session->device());
}

const char* cuvil_session_device_note(const cuvil_session* session) {
  return session ? session->session->device_note().c_str() : "";
}

cuvil_status cuvil_session_set_input(cuvil_session* session, const char* name, cuvil_dtype dtype,
                                     int32_t rank, const int64_t* dims, const void* data, size_t bytes) {
  if (!session || !name || rank < 0 || rank > CUVIL_MAX_RANK || (rank > 0 && !dims))
    return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_set_input: bad argument (null pointer or rank outside [0, 16])");
  return guarded([&]() -> cuvil_status {
    std::vector<int64_t> d(dims, dims + rank);
    return from(session->session->set_input(name, static_cast<cuvil::DType>(dtype), d, data, bytes));
  });
}

cuvil_status cuvil_session_run(cuvil_session* session) {
  if (!session) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_run: null session");
  return guarded([&]() -> cuvil_status {
    DefaultFloatEnvironment fenv;
    return from(session->session->run());
  });
}

cuvil_status cuvil_session_enable_run_stats(cuvil_session* session, int32_t enable) {
  if (!session) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_enable_run_stats: null session");
  session->session->enable_run_stats(enable != 0);
  return nullptr;
}

cuvil_status cuvil_session_get_run_stats(cuvil_session* session, cuvil_run_stats* out_stats) {
  if (!session || !out_stats)
    return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_get_run_stats: null session or stats");
  const cuvil::rt::RunStats& s = session->session->run_stats();
  out_stats->total_ns = s.total_ns;
  out_stats->bind_ns = s.bind_ns;
  out_stats->kernel_ns = s.kernel_ns;
  out_stats->dispatch_ns = s.dispatch_ns();
  out_stats->instructions = s.instructions;
  out_stats->kernel_calls = s.kernel_calls;
  return nullptr;
}

cuvil_status cuvil_session_enable_trace(cuvil_session* session, int32_t enable) {
  if (!session) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_enable_trace: null session");
  return guarded([&]() -> cuvil_status {
    session->session->enable_trace(enable != 0);
    session->trace_enabled_once = session->trace_enabled_once || enable != 0;
    return nullptr;
  });
}

cuvil_status cuvil_session_write_trace(cuvil_session* session, const char* path) {
  if (!session || !path || !*path)
    return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_write_trace: null session or empty path");
  if (!session->trace_enabled_once)
    return make(CUVIL_INVALID_ARGUMENT, std::string("cannot write the trace '") + path +
                                            "': tracing was never enabled on this session "
                                            "(cuvil_session_enable_trace)");
  return guarded([&]() -> cuvil_status {
    const std::string json = session->session->trace_json();
    // Beside the target, then renamed over it: a reader never sees half a trace.
    const std::string tmp = std::string(path) + ".tmp." + std::to_string(::getpid());
    auto io_error = [&](const char* what) {
      const int err = errno;
      std::remove(tmp.c_str());
      return make(CUVIL_IO, std::string("cannot write the trace '") + path + "': " + what + ": " + std::strerror(err));
    };
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) {
      const int err = errno;
      return make(CUVIL_IO, std::string("cannot write the trace '") + path + "': " + std::strerror(err));
    }
    const bool wrote = std::fwrite(json.data(), 1, json.size(), f) == json.size();
    const int write_errno = errno;
    if (std::fclose(f) != 0 || !wrote) {
      if (!wrote) errno = write_errno;
      return io_error("write failed");
    }
    if (std::rename(tmp.c_str(), path) != 0) return io_error("rename failed");
    return nullptr;
  });
}

cuvil_status cuvil_session_get_metrics(const cuvil_session* session, cuvil_session_metrics* out_metrics) {
  if (!session || !out_metrics)
    return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_get_metrics: null session or metrics");
  const cuvil::rt::SessionMetrics m = session->session->metrics();
  out_metrics->runs = m.runs;
  out_metrics->failures = m.failures;
  out_metrics->run_ns = m.run_ns;
  out_metrics->arena_bytes = m.arena_bytes;
  out_metrics->arena_peak_bytes = m.arena_peak_bytes;
  out_metrics->threads = m.threads;
  out_metrics->bucket = m.bucket;
  return nullptr;
}

const char* cuvil_cpu_path(void) { return cuvil::rt::cpu_path_name(cuvil::rt::active_cpu_path()); }

cuvil_status cuvil_session_cancel(cuvil_session* session) {
  if (!session) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_cancel: null session");
  return guarded([&]() -> cuvil_status {
    session->session->cancel();  // takes only the run-state mutex; never waits for the run
    return nullptr;
  });
}

cuvil_status cuvil_session_get_output(cuvil_session* session, size_t index, cuvil_tensor_info* out_info,
                                      const void** out_data, size_t* out_bytes) {
  if (!session || !out_info || !out_data || !out_bytes)
    return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_get_output: null argument");
  return guarded([&]() -> cuvil_status {
    const cuvil::rt::Program& p = session->session->program();
    if (index >= p.outputs.size())
      return make(CUVIL_INVALID_ARGUMENT, "output index " + std::to_string(index) + " out of range");
    const cuvil::rt::TensorView* v = session->session->output(index);
    if (!v) return make(CUVIL_INVALID_ARGUMENT, "no output: the last run did not succeed");
    if (v->dims.size() > CUVIL_MAX_RANK) return make(CUVIL_UNSUPPORTED, "output rank above CUVIL_MAX_RANK");
    session->output_shapes.resize(p.outputs.size());
    std::string& shape = session->output_shapes[index];
    shape = "[";
    std::memset(out_info, 0, sizeof *out_info);
    out_info->name = p.tensors[p.outputs[index]].name.c_str();
    out_info->dtype = static_cast<cuvil_dtype>(v->dtype);
    out_info->rank = static_cast<int32_t>(v->dims.size());
    for (size_t k = 0; k < v->dims.size(); ++k) {
      out_info->dims[k] = v->dims[k];
      shape += (k ? ", " : "") + std::to_string(v->dims[k]);
    }
    shape += "]";
    out_info->shape = shape.c_str();
    *out_data = v->data;
    *out_bytes = v->bytes();
    return nullptr;
  });
}

cuvil_status cuvil_session_copy_output(cuvil_session* session, size_t index, void* buffer, size_t capacity) {
  cuvil_tensor_info info;
  const void* data = nullptr;
  size_t bytes = 0;
  cuvil_status st = cuvil_session_get_output(session, index, &info, &data, &bytes);
  if (st) return st;
  if (capacity < bytes)
    return make(CUVIL_INVALID_ARGUMENT, "output '" + std::string(info.name) + "' needs " + std::to_string(bytes) +
                                            " bytes, buffer has " + std::to_string(capacity));
  if (bytes && !buffer) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_copy_output: null buffer");
  if (bytes) std::memcpy(buffer, data, bytes);
  return nullptr;
}

size_t cuvil_model_state_count(const cuvil_model* model) { return model ? model->states.size() : 0; }

cuvil_status cuvil_model_state_info(const cuvil_model* model, size_t index, cuvil_state_info* out_info) {
  if (!model || !out_info) return make(CUVIL_INVALID_ARGUMENT, "cuvil_model_state_info: null argument");
  if (index >= model->states.size())
    return make(CUVIL_INVALID_ARGUMENT, "state index " + std::to_string(index) + " out of range (model has " +
                                            std::to_string(model->states.size()) + " states)");
  *out_info = model->states[index];
  return nullptr;
}

cuvil_status cuvil_session_reset_state(cuvil_session* session) {
  if (!session) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_reset_state: null session");
  session->session->reset_state();
  return nullptr;
}

cuvil_status cuvil_session_state_length(const cuvil_session* session, int64_t* out_length) {
  if (!session || !out_length) return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_state_length: null argument");
  *out_length = session->session->state_count() ? session->session->state_length(0) : 0;
  return nullptr;
}

namespace {
// The state called `name`, or an error status naming the states.
cuvil_status find_state(const cuvil::rt::Session& s, const char* name, uint32_t* index) {
  *index = s.find_state(name);
  if (*index != cuvil::rt::kNone) return nullptr;
  std::string names;
  for (size_t i = 0; i < s.state_count(); ++i)
    names += (names.empty() ? "'" : ", '") + std::string(s.state_name(i)) + "'";
  return make(CUVIL_INVALID_ARGUMENT, "no state named '" + std::string(name) + "' (states: " +
                                          (names.empty() ? std::string("none, the package has no STATE") : names) + ")");
}
}  // namespace

cuvil_status cuvil_session_read_state(const cuvil_session* session, const char* name, cuvil_tensor_info* out_info,
                                      void* buffer, size_t capacity) {
  if (!session || !name || (capacity > 0 && !buffer))
    return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_read_state: null argument");
  return guarded([&]() -> cuvil_status {
    uint32_t index = 0;
    if (cuvil_status st = find_state(*session->session, name, &index)) return st;
    const cuvil::rt::Session& s = *session->session;
    if (out_info) {
      const std::vector<int64_t>& dims = s.state_dims(index);
      std::memset(out_info, 0, sizeof *out_info);
      out_info->name = s.state_name(index);
      out_info->dtype = static_cast<cuvil_dtype>(s.state_dtype(index));
      out_info->rank = static_cast<int32_t>(dims.size());
      std::string& shape = const_cast<cuvil_session*>(session)->state_shape;
      shape = "[";
      for (size_t k = 0; k < dims.size() && k < CUVIL_MAX_RANK; ++k) {
        out_info->dims[k] = dims[k];
        shape += (k ? ", " : "") + std::to_string(dims[k]);
      }
      shape += "]";
      out_info->shape = shape.c_str();
    }
    return from(s.read_state(index, buffer, capacity));
  });
}

cuvil_status cuvil_session_write_state(cuvil_session* session, const char* name, cuvil_dtype dtype, int32_t rank,
                                       const int64_t* dims, const void* data, size_t bytes) {
  if (!session || !name || rank < 0 || rank > CUVIL_MAX_RANK || (rank > 0 && !dims))
    return make(CUVIL_INVALID_ARGUMENT, "cuvil_session_write_state: bad argument (null pointer or rank outside [0, 16])");
  return guarded([&]() -> cuvil_status {
    uint32_t index = 0;
    if (cuvil_status st = find_state(*session->session, name, &index)) return st;
    std::vector<int64_t> d(dims, dims + rank);
    return from(session->session->write_state(index, static_cast<cuvil::DType>(dtype), d, data, bytes));
  });
}

}  // extern "C"
