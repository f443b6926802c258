/* libcuvil: load a .cuvir package and run it.
 *
 * Conventions (IREE-style): functions return a cuvil_status, NULL on success; a non-NULL
 * status carries a code and a message and must be freed with cuvil_status_free. Outputs come
 * last. No exception or abort crosses this API; a session stays usable after a failed run.
 *
 * Thread safety: a cuvil_model is immutable after loading and may be shared by any number of
 * sessions on any threads. A cuvil_session is used by one thread at a time; create one
 * session per concurrent caller. The one exception is cuvil_session_cancel, which may be
 * called from any thread at any time while the session exists.
 */
#ifndef CUVIL_H_
#define CUVIL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cuvil_status_code {
  CUVIL_OK = 0,
  CUVIL_INVALID_ARGUMENT = 1, /* bad API use or bad input (dtype, rank, dims, sizes, names) */
  CUVIL_INVALID_PACKAGE = 2,  /* the package failed verification */
  CUVIL_UNSUPPORTED = 3,      /* e.g. no CUDA driver, unknown device */
  CUVIL_IO = 4,               /* the file cannot be read */
  CUVIL_SHAPE = 5,            /* a dim outside the compiled range, inconsistent dims */
  CUVIL_RUNTIME = 6,          /* data-dependent failure while running (index out of range) */
  CUVIL_OUT_OF_MEMORY = 7,    /* memory, or a worker thread the OS refused to start */
  CUVIL_DEADLINE = 8,         /* the run exceeded its deadline */
  CUVIL_CANCELLED = 9,        /* the run was cancelled by cuvil_session_cancel */
} cuvil_status_code;

typedef struct cuvil_status_s* cuvil_status;
cuvil_status_code cuvil_status_code_of(cuvil_status status);
const char* cuvil_status_message(cuvil_status status); /* "" for NULL */
void cuvil_status_free(cuvil_status status);

/* Element types use ONNX TensorProto.DataType numbers (1 = float32, 7 = int64, 9 = bool). */
typedef int32_t cuvil_dtype;
const char* cuvil_dtype_name(cuvil_dtype dtype); /* "f32", "i64", ... */
size_t cuvil_dtype_size(cuvil_dtype dtype);      /* bytes per element; 0 if not byte-sized */

#define CUVIL_MAX_RANK 16

typedef struct cuvil_model_s cuvil_model;
typedef struct cuvil_session_s cuvil_session;

/* Loads and fully verifies a package. The file is memory-mapped; weights are used in place. */
cuvil_status cuvil_model_load_file(const char* path, cuvil_model** out_model);
/* Loads from memory; the bytes are copied, so `data` may be freed after the call. */
cuvil_status cuvil_model_load_memory(const void* data, size_t size, cuvil_model** out_model);
void cuvil_model_release(cuvil_model* model);

/* Description of an input or output. `shape` is the symbolic shape as text, e.g.
 * "[batch, seq, 768]"; dims[i] is the size, or -1 where the dim is symbolic. Strings stay
 * valid as long as the model. */
typedef struct cuvil_tensor_info {
  const char* name;
  cuvil_dtype dtype;
  int32_t rank;
  int64_t dims[CUVIL_MAX_RANK];
  const char* shape;
} cuvil_tensor_info;

size_t cuvil_model_input_count(const cuvil_model* model);
size_t cuvil_model_output_count(const cuvil_model* model);
cuvil_status cuvil_model_input_info(const cuvil_model* model, size_t index, cuvil_tensor_info* out_info);
cuvil_status cuvil_model_output_info(const cuvil_model* model, size_t index, cuvil_tensor_info* out_info);

/* The most threads a session may have (the caller included); more is CUVIL_INVALID_ARGUMENT. */
#define CUVIL_MAX_THREADS 256

/* Where a session runs. AUTO takes CUDA when the NVIDIA driver (opened at run time, never
 * linked), a device of sm_80 or newer and the package's PTX megakernel allow it, and the CPU
 * otherwise (cuvil_session_device_note says why). CUDA fails session creation with
 * CUVIL_UNSUPPORTED and a one-line reason when it cannot be used. This runtime cannot run
 * programs on CUDA yet (docs/security.md, "Devices"), so today AUTO always means the CPU. */
typedef enum cuvil_device {
  CUVIL_DEVICE_CPU = 0,
  CUVIL_DEVICE_CUDA = 1,
  CUVIL_DEVICE_AUTO = 2,
} cuvil_device;

typedef struct cuvil_session_options {
  /* Worker threads incl. the caller, in [0, CUVIL_MAX_THREADS]; 0 = all cores (at most
   * CUVIL_MAX_THREADS). */
  int32_t threads;
  /* A run stops with CUVIL_DEADLINE once it has taken this long; 0 = none. Checked before
   * every bytecode instruction and, inside kernels, before every chunk of work a thread
   * takes (docs/security.md, "Runtime: threads, deadlines, cancellation"), so a run ends
   * at most about one chunk per thread past the deadline. */
  int64_t deadline_ms;
  /* A cuvil_device; cuvil_session_options_init sets CUVIL_DEVICE_CPU. */
  int32_t device;
} cuvil_session_options;
void cuvil_session_options_init(cuvil_session_options* options);

/* Starts the session's threads - 1 worker threads. If the OS refuses one, returns
 * CUVIL_OUT_OF_MEMORY naming the thread and the OS error, with every thread it had started
 * stopped again and *out_session NULL. */
cuvil_status cuvil_session_create(cuvil_model* model, const cuvil_session_options* options,
                                  cuvil_session** out_session);
/* The device the session runs on (never CUVIL_DEVICE_AUTO), and, when AUTO chose the CPU,
 * why CUDA was not taken ("" otherwise; valid as long as the session). */
cuvil_device cuvil_session_device(const cuvil_session* session);
const char* cuvil_session_device_note(const cuvil_session* session);
/* Not while a cuvil_session_cancel on it may still be running on another thread. */
void cuvil_session_release(cuvil_session* session);

/* Binds an input by name. The data is borrowed until the next cuvil_session_run returns, and
 * every input must be set again before each run (a run forgets its bindings);
 * `bytes` must equal the product of dims times the element size. */
cuvil_status cuvil_session_set_input(cuvil_session* session, const char* name, cuvil_dtype dtype,
                                     int32_t rank, const int64_t* dims, const void* data,
                                     size_t bytes);
/* Runs with the inputs set since the last run. All inputs must be set. A run that stops
 * early (CUVIL_DEADLINE, CUVIL_CANCELLED) leaves no output; the session stays usable. */
cuvil_status cuvil_session_run(cuvil_session* session);
/* Cancels the run in progress on `session`, from any thread: that run stops at its next check
 * (the same points as the deadline's) and returns CUVIL_CANCELLED. A cancel is tied to the
 * run in progress when it is called: with no run in progress it does nothing, and it never
 * affects a later run. A run already past its last check returns its normal result. Returns
 * NULL (success) whether or not a run was in progress; CUVIL_INVALID_ARGUMENT for NULL. */
cuvil_status cuvil_session_cancel(cuvil_session* session);
/* Output of the last successful run: info (concrete dims) and a pointer to its data, valid
 * until the next run or the session's release. */
cuvil_status cuvil_session_get_output(cuvil_session* session, size_t index,
                                      cuvil_tensor_info* out_info, const void** out_data,
                                      size_t* out_bytes);
/* Copies an output into a caller buffer of `capacity` bytes (CUVIL_INVALID_ARGUMENT if small). */
cuvil_status cuvil_session_copy_output(cuvil_session* session, size_t index, void* buffer,
                                       size_t capacity);

/* Where a run's time went: the per-run cost of binding and scheduling next to the time inside
 * kernels. Times in nanoseconds from a monotonic clock (steady_clock). */
typedef struct cuvil_run_stats {
  int64_t total_ns;     /* the whole cuvil_session_run */
  int64_t bind_ns;      /* binding inputs and shapes: symbols, shape expressions, arena plan */
  int64_t kernel_ns;    /* inside kernels (whole-tensor op calls and tile kernels) */
  int64_t dispatch_ns;  /* total - bind - kernel: instruction dispatch, checks, scheduling */
  int64_t instructions; /* bytecode instructions executed */
  int64_t kernel_calls; /* of which kernel calls (CallOp, RunKernel) */
} cuvil_run_stats;
/* Turns the timing of the following runs on (nonzero) or off (0, the default). When on, a
 * run reads the clock twice per kernel call and a few times more; outputs do not change. */
cuvil_status cuvil_session_enable_run_stats(cuvil_session* session, int32_t enable);
/* The statistics of the last run, whatever its outcome; the times are 0 when timing was off
 * (the counts are always filled in). */
cuvil_status cuvil_session_get_run_stats(cuvil_session* session, cuvil_run_stats* out_stats);

/* Tracing: with tracing enabled (nonzero; it starts a new, empty recording) each following
 * run records when it bound its shapes and when each kernel call ran, on the calling thread
 * and on every worker thread that took part in it. A run reads the flag once when it starts;
 * with tracing off (the default) nothing is recorded and no clock is read for it. Turning it
 * off (0) keeps the recording for cuvil_session_write_trace. Call between runs. */
cuvil_status cuvil_session_enable_trace(cuvil_session* session, int32_t enable);
/* Writes the recording (the runs since tracing was last enabled) to `path` as Trace Event
 * JSON, which chrome://tracing and Perfetto (ui.perfetto.dev) open: one track per thread
 * (tid 0 the caller, w the session's worker w), one slice per kernel call named after the
 * ONNX node it runs (tile kernels: the last node they run), "run" and "bind" slices per run.
 * CUVIL_INVALID_ARGUMENT if tracing was never enabled, CUVIL_IO naming the path if it cannot
 * be written. The file is replaced atomically (written beside it, then renamed). */
cuvil_status cuvil_session_write_trace(cuvil_session* session, const char* path);

/* Counters over the session's life, for servers to export. Unlike the other session calls,
 * cuvil_session_get_metrics may be called from any thread at any time (also during a run). */
typedef struct cuvil_session_metrics {
  int64_t runs;             /* runs that ended, successful or not */
  int64_t failures;         /* of which failed (bad input, deadline, cancellation, ...) */
  int64_t run_ns;           /* total time inside cuvil_session_run */
  int64_t arena_bytes;      /* the arena the last run needed (it depends on the shapes bound) */
  int64_t arena_peak_bytes; /* the largest arena any run needed */
  int32_t threads;          /* the session's threads, the caller included */
  int32_t bucket;           /* the package program (shape bucket) the last run used; 0 before any */
} cuvil_session_metrics;
cuvil_status cuvil_session_get_metrics(const cuvil_session* session, cuvil_session_metrics* out_metrics);

/* ---- State (KV cache; docs/kv_cache.md) ----
 * A package compiled from a decoder with past/present inputs and outputs (present =
 * Concat(past, new) along the past-length axis) keeps the cache in the session: each state
 * stands for one past input and one present output. The caller does not set a state's input
 * (cuvil_session_set_input refuses it): every run binds it to the committed cache, whose
 * length binds the past symbol, and a successful run commits its present as the new cache. A
 * failed or cancelled run leaves every state as it was. The present outputs stay readable
 * with cuvil_session_get_output like any output. */
typedef struct cuvil_state_info {
  const char* name;     /* the state's name: its input's (e.g. "past_key_0") */
  const char* output;   /* the output it is updated from (e.g. "present_key_0") */
  size_t input_index;   /* its position among the model's inputs */
  size_t output_index;  /* and among its outputs */
  cuvil_dtype dtype;
  int32_t rank;
  int32_t axis;         /* the length axis */
  int64_t max_dims[CUVIL_MAX_RANK]; /* extents at their largest (max_dims[axis]: the maximum length) */
  const char* length_symbol;        /* the symbol of the length axis, e.g. "past" */
} cuvil_state_info;
/* Number of state tensors (0 for a package without STATE). */
size_t cuvil_model_state_count(const cuvil_model* model);
cuvil_status cuvil_model_state_info(const cuvil_model* model, size_t index, cuvil_state_info* out_info);
/* Empties every state (length 0): the next run starts a new sequence. */
cuvil_status cuvil_session_reset_state(cuvil_session* session);
/* The committed length (rows along the length axis) of the first state; 0 when empty or when
 * the package has no state. */
cuvil_status cuvil_session_state_length(const cuvil_session* session, int64_t* out_length);
/* Copies the committed contents of state `name` into `buffer` (CUVIL_INVALID_ARGUMENT when
 * `capacity` is too small); *out_info (optional) gets its dims. */
cuvil_status cuvil_session_read_state(const cuvil_session* session, const char* name, cuvil_tensor_info* out_info,
                                      void* buffer, size_t capacity);
/* Replaces state `name`'s contents with a copy of `data`; dims must lie within the state's
 * maximum extents (CUVIL_SHAPE otherwise) and its length becomes dims[axis]. Write every state
 * to the same length before the next run: they all bind the same symbol. */
cuvil_status cuvil_session_write_state(cuvil_session* session, const char* name, cuvil_dtype dtype, int32_t rank,
                                       const int64_t* dims, const void* data, size_t bytes);

/* The CPU kernel path this process runs: "portable", "avx2" or "avx512" (runtime/cpu/cpu_features.h;
 * CUVIL_CPU_PATH forces one). */
const char* cuvil_cpu_path(void);

#ifdef __cplusplus
}
#endif
#endif /* CUVIL_H_ */
