// A session runs a loaded package: it binds input shapes (evaluating the expression table:
// the whole "JIT"), sizes the arena, checks every tile access of every kernel against the
// bound shapes, picks the package's program whose bucket guard holds (runtime/package.h,
// BucketGuard), and interprets the code (whole-tensor kernels through the op table, tile
// kernels through runtime/cpu/tile_interpreter). A failed run leaves the session usable.
// Before every instruction, and through the thread pool before every chunk of a kernel, the
// run asks its RunStop (runtime/run_stop.h) whether its deadline has passed or another thread
// has cancelled it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/thread_pool.h"
#include "runtime/expr_eval.h"
#include "runtime/op_kernel.h"
#include "runtime/package.h"
#include "runtime/program.h"
#include "runtime/run_stop.h"
#include "runtime/trace.h"

namespace cuvil::rt {

// The most worker threads a session may have, the caller included (CUVIL_MAX_THREADS).
constexpr int kMaxSessionThreads = 256;

// Where the time of the last run went, when enabled (enable_run_stats): the per-run cost of
// binding and scheduling next to the time inside kernels. Measured with steady_clock.
struct RunStats {
  int64_t total_ns = 0;      // the whole run()
  int64_t bind_ns = 0;       // binding inputs and shapes: symbols, expressions, arena plan
  int64_t kernel_ns = 0;     // inside kernel functions (whole-tensor and tile)
  int64_t instructions = 0;  // bytecode instructions executed (counted even when disabled)
  int64_t kernel_calls = 0;  // of which CallOp and RunKernel
  // total - bind - kernel: instruction dispatch, checks, storage, the output check.
  int64_t dispatch_ns() const { return total_ns - bind_ns - kernel_ns; }
};

// Counters over the session's life (cuvil_session_metrics), for servers to export. Atomics:
// another thread may read them while a run is in progress.
struct SessionMetrics {
  int64_t runs = 0;              // runs that ended, successful or not
  int64_t failures = 0;          // of which failed (incl. deadline and cancellation)
  int64_t run_ns = 0;            // total time inside run()
  int64_t arena_bytes = 0;       // arena size the last run needed
  int64_t arena_peak_bytes = 0;  // the largest arena any run needed
  int threads = 0;               // the session's threads, the caller included
  int bucket = 0;                // the program (shape bucket) the last run chose
};

// Where a session runs (cuvil_device in the C API). kAuto takes CUDA when the driver, a device
// and the package allow it, else the CPU, keeping the reason (Session::device_note).
enum class Device { kCpu = 0, kCuda = 1, kAuto = 2 };

struct SessionOptions {
  int threads = 0;          // in [0, kMaxSessionThreads]; 0 = hardware concurrency, capped
  int64_t deadline_ms = 0;  // 0 = none
  Device device = Device::kCpu;
};

class Session {
 public:
  // Checks the options and starts the worker threads. On an error (options out of range,
  // kInvalidArgument; a thread the OS refuses, kOutOfMemory) *out stays empty and no thread
  // of the session is left running.
  static Status create(std::shared_ptr<const LoadedPackage> package, const SessionOptions& options,
                       std::unique_ptr<Session>* out);
  ~Session();

  // The program that ran last (or the first before any run); every program has the same
  // inputs and outputs.
  const Program& program() const { return *program_; }
  // Its index in the package's programs (the bucket).
  size_t program_index() const { return active_; }
  // Input by position; data is borrowed until run() returns.
  Status set_input(size_t index, DType dtype, const std::vector<int64_t>& dims, const void* data,
                   size_t bytes);
  Status set_input(const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                   const void* data, size_t bytes);
  Status run();
  // The one call that may come from another thread while run() runs: the run in progress, if
  // any, stops at its next check with kCancelled. Without a run in progress it does nothing
  // (the next run is not affected). Returns whether a run was in progress.
  bool cancel() { return stop_.cancel(); }
  // Valid after a successful run until the next run. The present of a state kept in place
  // (runtime/state_layout.h) is copied out of the state on its first read.
  const TensorView* output(size_t index);
  // Time the next runs (two clock reads per kernel call and a few per run); off by default.
  void enable_run_stats(bool on);
  // The last run's statistics (times 0 when disabled), whatever its outcome.
  const RunStats& run_stats() const { return stats_; }
  // Record a trace of the following runs (on: starts a new, empty recording; off: stops
  // recording and keeps what was recorded). Call between runs.
  void enable_trace(bool on);
  // The Trace Event JSON of the runs recorded since tracing was last enabled; "" when tracing
  // was never enabled.
  std::string trace_json() const;
  // Safe from any thread at any time.
  SessionMetrics metrics() const;
  // The device the session runs on (never kAuto) and, when kAuto chose the CPU, why CUDA was
  // not taken ("" otherwise).
  Device device() const { return device_; }
  const std::string& device_note() const { return device_note_; }

  // ---- State (KV cache): the package's STATE records (docs/kv_cache.md) ----
  // The session owns one tensor per record, allocated at its maximum extents when the session
  // is made. A state's input is not set by the caller: each run binds it to the committed
  // contents (its length symbol, e.g. `past`, takes the committed length) and, when the run
  // succeeds, the record's output (present = Concat(past, new)) becomes the committed
  // contents. A failed or cancelled run leaves every state as it was. A state kept in place
  // (runtime/state_layout.h) is never copied: the run appends after the committed rows and
  // the commit takes the new length.
  size_t state_count() const { return state_.size(); }
  // Index of the state whose name (its input's name) is `name`, or kNone.
  uint32_t find_state(const std::string& name) const;
  // Empties every state (length 0); the next run starts a new sequence.
  void reset_state();
  // The committed length (extent on the record's axis) of state `index` (0 when empty).
  int64_t state_length(size_t index) const;
  const char* state_name(size_t index) const { return state_[index].record->name.c_str(); }
  DType state_dtype(size_t index) const { return state_[index].record->dtype; }
  // The committed dims of state `index` (empty when it has never held rows).
  const std::vector<int64_t>& state_dims(size_t index) const { return state_[index].dims; }
  // Whether state `index` is kept in place (runtime/state_layout.h) rather than copied.
  bool state_in_place(size_t index) const { return state_[index].in_place; }
  // Copies state `index`'s committed contents (dims: state_dims) into `buffer`, packed.
  Status read_state(size_t index, void* buffer, size_t capacity) const;
  // Replaces state `index`'s contents (its length becomes dims[axis]); dims must fit the
  // record's maximum extents, dtype and bytes must match.
  Status write_state(size_t index, DType dtype, const std::vector<int64_t>& dims, const void* data, size_t bytes);

 private:
  Session(std::shared_ptr<const LoadedPackage> package, const SessionOptions& options);
  struct Buffer;
  struct NodeDispatch;
  // The status of a run stopped "before" or "in" the instruction at pc.
  Status stopped_at(size_t pc, const char* before_or_in) const;
  Status bind_inputs();
  Status prepare_tensors();
  Status execute();
  Status call_op(uint32_t node_index);
  Status run_kernel(uint32_t kernel_index);
  Status copy_tensor(uint32_t dst, uint32_t src);
  // Loops (runtime/session_loops.cpp).
  Status loop_init(uint32_t loop);
  Status loop_test(uint32_t loop, bool* done);
  Status loop_next(uint32_t loop);
  Status loop_exit(uint32_t loop);
  void start_iteration(const LoopDesc& l);
  Status read_scalar(uint32_t t, const char* what, int64_t* value);
  Status write_tensor(uint32_t t, const std::vector<int64_t>& dims, const void* data,
                      const std::string& who);
  // Gives tensor `t` storage for the given dims (arena slot, output buffer or heap).
  Status materialize(uint32_t t, const std::vector<int64_t>& dims, const std::string& who);
  Status eval_dims(uint32_t t, std::vector<int64_t>* dims, bool* unbound);

  friend class RunOpContext;

  struct LoopRun {  // a loop's scan outputs collected so far
    std::string who, who_state, who_scan_input;    // message prefixes, made once
    std::string who_counter, who_condition, who_result, who_scan_output;
    std::vector<std::vector<uint8_t>> slices;      // per scan output, concatenated
    std::vector<std::vector<int64_t>> slice_dims;  // per scan output
    int64_t count = 0;                             // slices collected per scan output
  };
  // Per program of the package, resolved when the session is made, so that a run looks
  // nothing up by name and spells no message unless it fails: per node its kernel,
  // attributes and message prefix; per tile kernel its prefix; the expression evaluator.
  struct ProgramState {
    explicit ProgramState(const Program& p);
    const Program& program;
    ExprEvaluator eval;
    std::vector<std::unique_ptr<NodeDispatch>> dispatch;  // NodeDispatch holds atomics: not movable
    std::vector<std::string> kernel_who;  // "kernel <name>"
    std::vector<LoopRun> loops;
    std::vector<uint32_t> in_place_state;  // per tensor: the in-place state it is the past or present of, or kNone
  };
  void activate(size_t index);
  size_t select_program() const;
  std::vector<std::unique_ptr<ProgramState>> states_;
  size_t active_ = 0;
  ProgramState* ps_ = nullptr;         // states_[active_]
  const Program* program_ = nullptr;   // &ps_->program
  ExprEvaluator* eval_ = nullptr;      // &ps_->eval
  std::vector<int64_t> dims_scratch_, own_dims_scratch_;  // reused by every run
  int64_t weight_views_program_ = -1;  // the program whose weight views are made; -1: none
  bool collect_stats_ = false;
  RunStats stats_;
  // Tracing: the recording (kept after tracing is turned off, for trace_json), whether to
  // record (read once per run into tracing_), and the pool's per-thread spans.
  std::unique_ptr<TraceRecorder> trace_;
  bool trace_enabled_ = false, tracing_ = false;
  uint32_t trace_run_ = 0;
  std::vector<WorkerSpan> spans_;
  void trace_kernel_call(bool is_op, uint32_t index, uint32_t pc, int64_t begin_ns);
  void trace_run_span(TraceEvent::Kind kind, int64_t begin_ns, int64_t end_ns, int32_t status);
  std::atomic<int> last_program_{0};  // metrics().bucket
  std::atomic<int64_t> runs_{0}, failures_{0}, run_ns_{0}, arena_bytes_{0}, arena_peak_bytes_{0};

  std::shared_ptr<const LoadedPackage> package_;
  SessionOptions options_;
  Device device_ = Device::kCpu;
  std::string device_note_;
  RunStop stop_;     // before pool_: the pool asks it, so it must outlive the workers
  ThreadPool pool_;

  struct InputBinding {
    bool set = false;
    DType dtype = DType::Undefined;
    std::vector<int64_t> dims;
    const void* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<InputBinding> inputs_;
  struct StateBuffer {
    const StateRecord* record = nullptr;
    std::string who;                 // "state 'past_key_0'"
    std::vector<uint8_t> data;       // committed contents, packed; capacity >= max bytes + 1
    std::vector<int64_t> dims;       // committed dims; empty: never held rows since reset
    // Per dim, the (input, dim) of a caller's input with the same bare symbol, which gives
    // the extent of an empty state (e.g. batch); kNone when there is none.
    std::vector<std::pair<uint32_t, uint32_t>> dim_source;
    size_t max_bytes = 0;
    // In place (runtime/state_layout.h): `data` holds max_bytes, each block of rows along the
    // axis `capacity` rows apart; the committed rows are [0, dims[axis]). Otherwise `data`
    // holds the committed contents packed.
    bool in_place = false;
    int64_t capacity = 0;         // max_dims[axis]
    bool present_packed = false;  // the last run's present output was copied out (packed_present)
  };
  std::vector<StateBuffer> state_;
  std::vector<uint32_t> input_state_;  // per input: its state, or kNone
  Status bind_states();
  Status check_present(const StateBuffer& b, DType dtype, const std::vector<int64_t>& dims) const;
  Status commit_states();
  const TensorView* packed_present(uint32_t index);
  std::vector<TensorView> views_;     // one per tensor
  std::vector<uint8_t> ready_;        // tensor has storage this run
  std::vector<std::vector<uint8_t>> heap_;  // dynamic tensors and outputs, per tensor
  uint8_t* arena_ = nullptr;
  size_t arena_capacity_ = 0;
  bool last_run_ok_ = false;
};

}  // namespace cuvil::rt
