#include "runtime/session.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/cpu/tile_interpreter.h"
#include "runtime/cuda/driver.h"
#include "runtime/state_layout.h"
#include "runtime/testing_hooks.h"
#include "support/checked.h"

namespace cuvil::rt {
namespace {

constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;  // refuse absurd allocations

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// A tensor as blocks of rows along `axis`: `outer` blocks (the product of the dims before the
// axis) of `rows` rows of `row_bytes` bytes. An in-place state keeps each block `capacity` rows
// apart; copy_row_blocks moves the rows between that layout and a packed tensor.
struct RowBlocks {
  int64_t outer = 1, rows = 0;
  size_t row_bytes = 0;
};

RowBlocks row_blocks(DType dtype, const std::vector<int64_t>& dims, size_t axis) {
  RowBlocks b;
  b.rows = dims[axis];
  int64_t inner = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k < axis) b.outer *= dims[k];
    if (k > axis) inner *= dims[k];
  }
  b.row_bytes = static_cast<size_t>(inner) * static_cast<size_t>(dtype_bits(dtype) / 8);
  return b;
}

// Block o's rows: from src + o * src_stride rows to dst + o * dst_stride rows.
void copy_row_blocks(const RowBlocks& b, uint8_t* dst, int64_t dst_stride, const uint8_t* src, int64_t src_stride) {
  if (b.rows == 0 || b.row_bytes == 0) return;
  for (int64_t o = 0; o < b.outer; ++o)
    std::memcpy(dst + static_cast<size_t>(o * dst_stride) * b.row_bytes,
                src + static_cast<size_t>(o * src_stride) * b.row_bytes, static_cast<size_t>(b.rows) * b.row_bytes);
}

// The clock of the run statistics: steady_clock, a vDSO read of about 20 ns, taken only
// when statistics are on (twice per kernel call, twice per run).
int64_t stats_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::optional<uint64_t> byte_size(DType dtype, const std::vector<int64_t>& dims) {
  auto n = checked_numel(dims);
  if (!n) return std::nullopt;
  auto bits = checked_mul_u64(static_cast<uint64_t>(*n), static_cast<uint64_t>(dtype_bits(dtype)));
  if (!bits) return std::nullopt;
  return (*bits + 7) / 8;
}

// A node's attributes for its kernel. Kernels ask by name with string literals, the same
// pointer on every run, so each lookup is remembered by the name's address in a small
// per-node cache: after a node's first run its lookups compare pointers, not strings. The
// cache is filled under atomics, since a kernel may ask from inside a parallel_for.
class PackageAttrReader : public AttrReader {
 public:
  explicit PackageAttrReader(const NodeRecord& node) : node_(node) {
    for (const AttrValue& a : node.attrs)
      if (a.kind == AttrValue::Kind::kTensor) {
        TensorView v;
        v.dtype = a.tensor_dtype;
        v.dims = a.ints;
        v.data = const_cast<uint8_t*>(a.tensor_bytes.data());
        tensors_.emplace_back(&a, v);
      }
  }
  const AttrValue* find(const char* name) const {
    const int filled = std::min(cache_used_.load(std::memory_order_acquire), kCacheSize);
    for (int i = 0; i < filled; ++i)
      if (cache_[i].key.load(std::memory_order_acquire) == name) {
#ifndef NDEBUG
        // The contract (op_kernel.h): a name's address always spells the same name.
        const AttrValue* v = cache_[i].value;
        assert(v ? v->name == name : std::none_of(node_.attrs.begin(), node_.attrs.end(),
                                                  [&](const AttrValue& a) { return a.name == name; }));
#endif
        return cache_[i].value;
      }
    // The first lookup of this name (or the cache is full): scan by name, then remember it.
    testing::count_name_lookup();
    const AttrValue* found = nullptr;
    for (const AttrValue& a : node_.attrs)
      if (a.name == name) {
        found = &a;
        break;
      }
    const int slot = cache_used_.load(std::memory_order_relaxed);
    if (slot < kCacheSize && slot == filled) {
      int expected = slot;
      // Claim the slot first so that two threads never write the same one; readers see it
      // only once its key is stored (release), after its value.
      if (claimed_.compare_exchange_strong(expected, slot + 1)) {
        cache_[slot].value = found;
        cache_[slot].key.store(name, std::memory_order_release);
        cache_used_.store(slot + 1, std::memory_order_release);
      }
    }
    return found;
  }
  bool has(const char* name) const override { return find(name) != nullptr; }
  int64_t get_int(const char* name, int64_t fallback) const override {
    const AttrValue* a = find(name);
    return a && a->kind == AttrValue::Kind::kInt && !a->ints.empty() ? a->ints[0] : fallback;
  }
  float get_float(const char* name, float fallback) const override {
    const AttrValue* a = find(name);
    if (a && a->kind == AttrValue::Kind::kFloat && !a->floats.empty()) return a->floats[0];
    if (a && a->kind == AttrValue::Kind::kInt && !a->ints.empty()) return static_cast<float>(a->ints[0]);
    return fallback;
  }
  std::string get_string(const char* name, const std::string& fallback) const override {
    const AttrValue* a = find(name);
    return a && a->kind == AttrValue::Kind::kString && !a->strings.empty() ? a->strings[0] : fallback;
  }
  std::vector<int64_t> get_ints(const char* name) const override {
    const AttrValue* a = find(name);
    return a && a->kind == AttrValue::Kind::kInts ? a->ints : std::vector<int64_t>{};
  }
  std::vector<float> get_floats(const char* name) const override {
    const AttrValue* a = find(name);
    return a && a->kind == AttrValue::Kind::kFloats ? a->floats : std::vector<float>{};
  }
  std::vector<std::string> get_strings(const char* name) const override {
    const AttrValue* a = find(name);
    return a && a->kind == AttrValue::Kind::kStrings ? a->strings : std::vector<std::string>{};
  }
  const TensorView* get_tensor(const char* name) const override {
    const AttrValue* a = find(name);
    for (const auto& [attr, v] : tensors_)
      if (attr == a) return &v;
    return nullptr;
  }

 private:
  static constexpr int kCacheSize = 8;  // more distinct names than this fall back to scanning
  struct CacheEntry {
    std::atomic<const char*> key{nullptr};
    const AttrValue* value = nullptr;
  };
  const NodeRecord& node_;
  std::vector<std::pair<const AttrValue*, TensorView>> tensors_;
  mutable CacheEntry cache_[kCacheSize];
  mutable std::atomic<int> claimed_{0}, cache_used_{0};
};

}  // namespace

// What a CallOp needs, resolved once when the session is made: the kernel (by the op table,
// not by name per run), the attributes and the prefix that the node's messages start with.
struct Session::NodeDispatch {
  explicit NodeDispatch(const NodeRecord& node)
      : fn(find_op_kernel(node.domain, node.op_type)),
        attrs(node),
        who(node.op_type + " node '" + node.name + "'") {}
  OpKernelFn fn;  // nullptr: no CPU kernel (reported when the node runs)
  PackageAttrReader attrs;
  std::string who;
};

class RunOpContext : public OpContext {
 public:
  RunOpContext(Session& s, const NodeRecord& node, const Session::NodeDispatch& dispatch)
      : s_(s), node_(node), dispatch_(dispatch) {}
  const char* op_name() const override { return node_.op_type.c_str(); }
  const char* node_name() const override { return node_.name.c_str(); }
  int opset() const override { return node_.opset; }
  const AttrReader& attrs() const override { return dispatch_.attrs; }
  size_t num_inputs() const override { return node_.inputs.size(); }
  const TensorView* input(size_t i) const override {
    if (i >= node_.inputs.size() || node_.inputs[i] == kNone) return nullptr;
    return &s_.views_[node_.inputs[i]];
  }
  size_t num_outputs() const override { return node_.outputs.size(); }
  bool output_wanted(size_t i) const override {
    return i < node_.outputs.size() && node_.outputs[i] != kNone;
  }
  int64_t cache_capacity(size_t i) const override {
    if (i >= node_.inputs.size() || node_.inputs[i] == kNone) return 0;
    const uint32_t t = node_.inputs[i];
    const uint32_t state = s_.ps_->in_place_state[t];
    return state != kNone && s_.program_->tensors[t].kind == TensorKind::kInput ? s_.state_[state].capacity : 0;
  }
  Status allocate_output(size_t i, DType dtype, const std::vector<int64_t>& dims,
                         TensorView** out) override {
    if (!output_wanted(i)) {
      // The caller did not ask for this output: give the kernel scratch storage.
      if (i >= scratch_.size()) scratch_.resize(i + 1);
      auto bytes = byte_size(dtype, dims);
      if (!bytes || *bytes > kMaxTensorBytes)
        return error(StatusCode::kOutOfMemory, "output ", i, " would be too large");
      scratch_[i].first.assign(*bytes, 0);
      scratch_[i].second.dtype = dtype;
      scratch_[i].second.dims = dims;
      scratch_[i].second.data = scratch_[i].first.data();
      *out = &scratch_[i].second;
      return Status::ok();
    }
    const uint32_t t = node_.outputs[i];
    if (dtype != s_.program_->tensors[t].dtype)
      return error(StatusCode::kRuntime, "output ", i, " has dtype ", dtype_name(dtype),
                   " but the compiled program expects ", dtype_name(s_.program_->tensors[t].dtype));
    CUVIL_RETURN_IF_ERROR(s_.materialize(t, dims, dispatch_.who));
    *out = &s_.views_[t];
    return Status::ok();
  }
  int threads() const override { return s_.pool_.threads(); }
  void parallel_for(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* arg) override {
    s_.pool_.parallel_for(n, grain, [&](int64_t b, int64_t e, int) { fn(arg, b, e); });
  }

 private:
  Session& s_;
  const NodeRecord& node_;
  const Session::NodeDispatch& dispatch_;
  std::vector<std::pair<std::vector<uint8_t>, TensorView>> scratch_;
};

Session::ProgramState::ProgramState(const Program& p) : program(p), eval(p) {
  eval.cache_constants();  // the package is verified: every expression is well formed
  loops.resize(p.loops.size());
  for (size_t i = 0; i < loops.size(); ++i) {
    loops[i].who = "loop '" + p.loops[i].name + "'";
    loops[i].who_state = loops[i].who + " state";
    loops[i].who_scan_input = loops[i].who + " scan input";
    loops[i].who_counter = loops[i].who + " counter";
    loops[i].who_condition = loops[i].who + " condition";
    loops[i].who_result = loops[i].who + " result";
    loops[i].who_scan_output = loops[i].who + " scan output";
  }
  // Everything a run would otherwise look up or spell per instruction.
  dispatch.reserve(p.nodes.size());
  for (const NodeRecord& node : p.nodes) dispatch.push_back(std::make_unique<NodeDispatch>(node));
  kernel_who.reserve(p.kernels.size());
  for (const TileKernel& k : p.kernels) kernel_who.push_back("kernel " + k.name);
}

Session::Session(std::shared_ptr<const LoadedPackage> package, const SessionOptions& options)
    : package_(std::move(package)), options_(options) {
  // Every program's dispatch is resolved now; a run only switches pointers.
  size_t tensors = 0;
  for (const Program& p : package_->programs()) {
    states_.push_back(std::make_unique<ProgramState>(p));
    tensors = std::max(tensors, p.tensors.size());
  }
  activate(0);
  inputs_.resize(program_->inputs.size());  // the same inputs in every program (checked at load)
  views_.resize(tensors);
  ready_.assign(tensors, 0);
  heap_.resize(tensors);
  // State tensors: both the committed buffer and every program's present output buffer are
  // reserved at the maximum size, so that swapping them on commit never reallocates (and a
  // state kept in place, whose buffer is never swapped, packs its present there when read).
  input_state_.assign(inputs_.size(), kNone);
  const Program& p0 = *program_;
  ExprEvaluator eval(p0);
  std::vector<const Program*> programs;
  for (const Program& p : package_->programs()) programs.push_back(&p);
  const std::vector<StateLayout> layouts = plan_state_layouts(programs, package_->states());
  for (const std::unique_ptr<ProgramState>& ps : states_) ps->in_place_state.assign(ps->program.tensors.size(), kNone);
  for (const StateRecord& r : package_->states()) {
    StateBuffer b;
    b.record = &r;
    b.who = "state '" + r.name + "'";
    b.max_bytes = byte_size(r.dtype, r.max_dims).value_or(0);  // checked at load
    b.in_place = layouts[state_.size()].in_place;
    b.capacity = r.max_dims[r.axis];
    if (b.in_place) b.data.resize(b.max_bytes + 1);  // never resized again: kernels append into it
    else b.data.reserve(b.max_bytes + 1);
    for (const std::unique_ptr<ProgramState>& ps : states_) {
      heap_[ps->program.outputs[r.output]].reserve(b.max_bytes + 1);
      if (b.in_place)
        for (uint32_t t : {ps->program.inputs[r.input], ps->program.outputs[r.output]})
          ps->in_place_state[t] = static_cast<uint32_t>(state_.size());
    }
    input_state_[r.input] = static_cast<uint32_t>(state_.size());
    const TensorDesc& d = p0.tensors[p0.inputs[r.input]];
    b.dim_source.assign(d.dims.size(), {kNone, kNone});
    for (size_t k = 0; k < d.dims.size(); ++k) {
      const uint32_t sym = eval.as_symbol(d.dims[k]);
      if (k == r.axis || sym == kNone) continue;
      for (uint32_t i = 0; i < p0.inputs.size() && b.dim_source[k].first == kNone; ++i) {
        bool is_state = false;
        for (const StateRecord& o : package_->states()) is_state |= o.input == i;
        if (is_state) continue;
        const TensorDesc& u = p0.tensors[p0.inputs[i]];
        for (uint32_t j = 0; j < u.dims.size(); ++j)
          if (eval.as_symbol(u.dims[j]) == sym) {
            b.dim_source[k] = {i, j};
            break;
          }
      }
    }
    state_.push_back(std::move(b));
  }
}

uint32_t Session::find_state(const std::string& name) const {
  for (size_t i = 0; i < state_.size(); ++i)
    if (state_[i].record->name == name) return static_cast<uint32_t>(i);
  return kNone;
}

void Session::reset_state() {
  for (StateBuffer& b : state_) b.dims.clear();
}

int64_t Session::state_length(size_t index) const {
  const StateBuffer& b = state_[index];
  return b.dims.empty() ? 0 : b.dims[b.record->axis];
}

Status Session::read_state(size_t index, void* buffer, size_t capacity) const {
  const StateBuffer& b = state_[index];
  const size_t bytes = b.dims.empty() ? 0 : static_cast<size_t>(byte_size(b.record->dtype, b.dims).value_or(0));
  if (capacity < bytes)
    return make_status(StatusCode::kInvalidArgument, b.who, " holds ", bytes, " bytes (", dims_text(b.dims),
                       "), the buffer has ", capacity);
  if (!bytes) return Status::ok();
  if (b.in_place)
    copy_row_blocks(row_blocks(b.record->dtype, b.dims, b.record->axis), static_cast<uint8_t*>(buffer),
                    b.dims[b.record->axis], b.data.data(), b.capacity);
  else
    std::memcpy(buffer, b.data.data(), bytes);
  return Status::ok();
}

Status Session::write_state(size_t index, DType dtype, const std::vector<int64_t>& dims, const void* data,
                            size_t bytes) {
  StateBuffer& b = state_[index];
  const StateRecord& r = *b.record;
  if (dtype != r.dtype)
    return make_status(StatusCode::kInvalidArgument, b.who, ": dtype ", dtype_name(dtype), ", expected ",
                       dtype_name(r.dtype));
  if (dims.size() != r.max_dims.size())
    return make_status(StatusCode::kInvalidArgument, b.who, ": rank ", dims.size(), ", expected ", r.max_dims.size());
  for (size_t k = 0; k < dims.size(); ++k)
    if (dims[k] < 0 || dims[k] > r.max_dims[k])
      return make_status(StatusCode::kShape, b.who, ": dim ", k, " is ", dims[k], ", outside [0, ", r.max_dims[k],
                         "] (the compiled maximum ", dims_text(r.max_dims), ")");
  const uint64_t need = byte_size(dtype, dims).value_or(UINT64_MAX);
  if (need != bytes)
    return make_status(StatusCode::kInvalidArgument, b.who, ": buffer has ", bytes, " bytes but shape ",
                       dims_text(dims), " needs ", need);
  if (!data && bytes > 0) return make_status(StatusCode::kInvalidArgument, b.who, ": data is null");
  if (b.in_place) {
    // The last run's present output is read from this buffer: keep it readable as it was.
    if (last_run_ok_) packed_present(static_cast<uint32_t>(index));
    copy_row_blocks(row_blocks(dtype, dims, r.axis), b.data.data(), b.capacity, static_cast<const uint8_t*>(data),
                    dims[r.axis]);
  } else {
    b.data.resize(bytes + 1);  // within the reserved capacity
    if (bytes) std::memcpy(b.data.data(), data, bytes);
  }
  b.dims = dims;
  return Status::ok();
}

// Each state input is bound to the committed contents: the length symbol takes the committed
// length (0 when empty) and the other symbolic dims the committed ones, or, when the state is
// empty, the caller's input that has the same symbol (batch from input_ids).
Status Session::bind_states() {
  for (StateBuffer& b : state_) {
    const StateRecord& r = *b.record;
    InputBinding& in = inputs_[r.input];
    std::vector<int64_t>& dims = dims_scratch_;  // reused: no allocation per state per run
    dims = r.max_dims;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (k == r.axis) {
        dims[k] = b.dims.empty() ? 0 : b.dims[k];
        continue;
      }
      const auto [i, j] = b.dim_source[k];
      if (i != kNone && inputs_[i].set && j < inputs_[i].dims.size()) {
        dims[k] = inputs_[i].dims[j];
        if (!b.dims.empty() && b.dims[k] != dims[k])
          return make_status(StatusCode::kShape, b.who, " holds ", dims_text(b.dims), " but input '",
                             program_->tensors[program_->inputs[i]].name, "' dim ", j, " is ", dims[k],
                             "; reset the state to start a sequence of another shape");
      } else if (!b.dims.empty()) {
        dims[k] = b.dims[k];
      }
      // Else a constant dim, or a symbol no input gives: its maximum (checked at load).
    }
    in.set = true;
    in.dtype = r.dtype;
    in.dims = dims;  // within the capacity of the previous run's dims
    in.bytes = static_cast<size_t>(byte_size(r.dtype, in.dims).value_or(0));  // <= max_bytes: dims <= max
    in.data = b.data.data();
  }
  return Status::ok();
}

// Whether a present of `dtype` and `dims` made for state `b` extends its past (same dims but
// the axis, no shorter) and fits the maximum length.
Status Session::check_present(const StateBuffer& b, DType dtype, const std::vector<int64_t>& dims) const {
  const StateRecord& r = *b.record;
  const std::vector<int64_t>& past = inputs_[r.input].dims;
  bool extends = dims.size() == past.size() && dtype == r.dtype;
  for (size_t k = 0; extends && k < past.size(); ++k) extends = k == r.axis ? dims[k] >= past[k] : dims[k] == past[k];
  if (!extends)
    return make_status(StatusCode::kRuntime, b.who, ": output '", program_->tensors[program_->outputs[r.output]].name,
                       "' has shape ", dims_text(dims), ", which does not extend the state's ", dims_text(past),
                       " along axis ", r.axis);
  if (dims[r.axis] > r.max_dims[r.axis]) {
    const Symbol& sym = program_->symbols[r.symbol];
    return make_status(StatusCode::kShape, b.who, ": this run would leave ", dims[r.axis],
                       " rows in the cache, past the range of '", sym.name, "' [", sym.lo, ", ", sym.hi,
                       "] (compile with a larger --dim ", sym.name, "=", sym.lo, ":N, or reset the state)");
  }
  return Status::ok();
}

// After a successful run: every state's present must extend its past and fit the maximum
// length; then all are committed at once. A state kept in place already holds the new rows
// after its committed ones (the kernel appended them): committing is taking the new length.
Status Session::commit_states() {
  for (StateBuffer& b : state_) {
    const TensorView& v = views_[program_->outputs[b.record->output]];
    CUVIL_RETURN_IF_ERROR(check_present(b, v.dtype, v.dims));
    if (b.in_place && v.data != b.data.data())
      return make_status(StatusCode::kRuntime, b.who, ": the present was not written in place");
  }
  for (StateBuffer& b : state_) {
    const StateRecord& r = *b.record;
    const uint32_t t = program_->outputs[r.output];
    const TensorView& v = views_[t];
    const size_t bytes = v.bytes();
    if (b.in_place) {
      b.present_packed = false;
    } else if (v.data == heap_[t].data() && heap_[t].capacity() >= b.max_bytes + 1) {
      // Double buffering: the present becomes the state, the old state the next present's
      // storage. The output's view stays valid (it points into the committed buffer).
      std::swap(heap_[t], b.data);
    } else {
      b.data.resize(bytes + 1);
      if (bytes) std::memcpy(b.data.data(), v.data, bytes);
    }
    b.dims = v.dims;
  }
  return Status::ok();
}

void Session::activate(size_t index) {
  active_ = index;
  ps_ = states_[index].get();
  program_ = &ps_->program;
  eval_ = &ps_->eval;
}

// The first program whose guard holds for the symbols bound from the inputs (the last
// program's guard is empty, so there always is one).
size_t Session::select_program() const {
  const std::vector<BucketGuard>& guards = package_->guards();
  for (size_t i = 0; i < guards.size(); ++i) {
    bool holds = true;
    for (const BucketGuard::Range& r : guards[i].ranges) {
      if (!eval_->bound(r.symbol)) {
        holds = false;
        break;
      }
      const int64_t v = eval_->symbol_value(r.symbol);
      if (v < r.lo || v > r.hi) {
        holds = false;
        break;
      }
    }
    if (holds) return i;
  }
  return guards.size() - 1;
}

// Whether a session on this package could run on CUDA; the status says why not. The driver is
// opened at run time (runtime/cuda/driver.h), so this answers on machines without one too.
// Running programs on the GPU (the PTX megakernel, issue 12) is not in this runtime yet, so
// today every path ends in kUnsupported with the first reason that applies.
static Status cuda_usable(const LoadedPackage& package) {
  const cuda::DeviceInfo& info = cuda::probe();
  if (!info.usable) return Status(StatusCode::kUnsupported, "device cuda: " + info.reason);
  if (package.ptx().empty())
    return Status(StatusCode::kUnsupported,
                  "device cuda: the package has no PTX section (the megakernel for " + info.name + ")");
  return Status(StatusCode::kUnsupported, "device cuda: " + info.name +
                                              " found, but this runtime cannot run programs on CUDA yet");
}

Status Session::create(std::shared_ptr<const LoadedPackage> package, const SessionOptions& options,
                       std::unique_ptr<Session>* out) {
  out->reset();
  if (options.threads < 0 || options.threads > kMaxSessionThreads)
    return make_status(StatusCode::kInvalidArgument, "session options: threads = ", options.threads,
                       " is outside [0, ", kMaxSessionThreads, "] (the maximum is CUVIL_MAX_THREADS = ",
                       kMaxSessionThreads, ")");
  if (options.deadline_ms < 0)
    return make_status(StatusCode::kInvalidArgument, "session options: deadline_ms = ", options.deadline_ms,
                       " is negative");
  std::string why_not_cuda;
  if (options.device != Device::kCpu) {
    Status cuda = cuda_usable(*package);
    if (options.device == Device::kCuda && !cuda.is_ok()) return cuda;
    why_not_cuda = cuda.message();
  }
  std::unique_ptr<Session> s(new Session(std::move(package), options));
  s->device_note_ = std::move(why_not_cuda);
  const int threads =
      options.threads > 0
          ? options.threads
          : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxSessionThreads);
  Status st = s->pool_.start(threads);
  if (!st.is_ok()) return Status(st.code(), "session: " + st.message());
  s->pool_.set_stop_check(&s->stop_);
  // Every weight panel whose key is known before a run is packed now, once per package (the
  // cache is shared by its sessions), so that the first run of any shape packs none of them.
  for (const Program& p : s->package_->programs()) prepack_tile_kernel_weights(p, s->package_->weights(), s->pool_);
  *out = std::move(s);
  return Status::ok();
}

Session::~Session() { std::free(arena_); }

void Session::enable_trace(bool on) {
  trace_enabled_ = on;
  if (!on) return;
  if (!trace_) trace_ = std::make_unique<TraceRecorder>();
  trace_->clear();
}

std::string Session::trace_json() const {
  return trace_ ? trace_->to_json(package_->programs(), pool_.threads()) : "";
}

SessionMetrics Session::metrics() const {
  SessionMetrics m;
  m.runs = runs_.load(std::memory_order_relaxed);
  m.failures = failures_.load(std::memory_order_relaxed);
  m.run_ns = run_ns_.load(std::memory_order_relaxed);
  m.arena_bytes = arena_bytes_.load(std::memory_order_relaxed);
  m.arena_peak_bytes = arena_peak_bytes_.load(std::memory_order_relaxed);
  m.threads = pool_.threads();
  m.bucket = last_program_.load(std::memory_order_relaxed);
  return m;
}

// A slice of the caller's track for this run (kRun, kBind).
void Session::trace_run_span(TraceEvent::Kind kind, int64_t begin_ns, int64_t end_ns, int32_t status) {
  TraceEvent e;
  e.kind = kind;
  e.index = trace_run_;
  e.begin_ns = begin_ns;
  e.end_ns = end_ns;
  e.status = status;
  trace_->add(e);
}

// One kernel call's slices: the caller's from begin_ns to now, and one per worker that took
// chunks in it (worker spans are reset here for the next call).
void Session::trace_kernel_call(bool is_op, uint32_t index, uint32_t pc, int64_t begin_ns) {
  TraceEvent e;
  e.kind = is_op ? TraceEvent::Kind::kOp : TraceEvent::Kind::kKernel;
  e.program = static_cast<uint16_t>(active_);
  e.index = index;
  e.pc = pc;
  e.begin_ns = begin_ns;
  e.end_ns = trace_clock_ns();
  trace_->add(e);
  // The caller's own chunks are inside the slice above: its span is only cleared.
  if (!spans_.empty()) spans_[0] = WorkerSpan{};
  for (size_t w = 1; w < spans_.size(); ++w) {
    WorkerSpan& span = spans_[w];
    if (span.chunks == 0) continue;
    TraceEvent we;
    we.kind = TraceEvent::Kind::kWorker;
    we.program = static_cast<uint16_t>(active_);
    we.is_op = is_op ? 1 : 0;
    we.tid = static_cast<uint16_t>(w);
    we.index = index;
    we.pc = pc;
    we.begin_ns = span.begin_ns;
    we.end_ns = span.end_ns;
    we.chunks = span.chunks;
    trace_->add(we);
    span = WorkerSpan{};
  }
}

void Session::enable_run_stats(bool on) {
  collect_stats_ = on;
  stats_ = RunStats{};
}

Status Session::set_input(size_t index, DType dtype, const std::vector<int64_t>& dims,
                          const void* data, size_t bytes) {
  if (index >= program_->inputs.size())
    return make_status(StatusCode::kInvalidArgument, "input index ", index, " out of range (model has ",
                       program_->inputs.size(), " inputs)");
  const TensorDesc& d = program_->tensors[program_->inputs[index]];
  if (input_state_[index] != kNone)
    return make_status(StatusCode::kInvalidArgument, "input '", d.name,
                       "' is session state (KV cache): the session binds it to the committed cache; use the "
                       "state calls (cuvil_session_write_state) to change it");
  if (dtype != d.dtype)
    return make_status(StatusCode::kInvalidArgument, "input '", d.name, "': dtype ", dtype_name(dtype),
                       ", expected ", dtype_name(d.dtype));
  if (dims.size() != d.dims.size())
    return make_status(StatusCode::kInvalidArgument, "input '", d.name, "': rank ", dims.size(),
                       ", expected ", d.dims.size());
  for (size_t k = 0; k < dims.size(); ++k)
    if (dims[k] < 0)
      return make_status(StatusCode::kInvalidArgument, "input '", d.name, "': dim ", k, " is negative (", dims[k], ")");
  auto need = byte_size(dtype, dims);
  if (!need) return make_status(StatusCode::kInvalidArgument, "input '", d.name, "': size overflows");
  if (*need != bytes)
    return make_status(StatusCode::kInvalidArgument, "input '", d.name, "': buffer has ", bytes,
                       " bytes but shape ", dims_text(dims), " of ", dtype_name(dtype), " needs ", *need);
  if (!data && bytes > 0)
    return make_status(StatusCode::kInvalidArgument, "input '", d.name, "': data is null");
  InputBinding& b = inputs_[index];
  b.set = true;
  b.dtype = dtype;
  b.dims = dims;
  b.data = data;
  b.bytes = bytes;
  return Status::ok();
}

Status Session::set_input(const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                          const void* data, size_t bytes) {
  for (size_t i = 0; i < program_->inputs.size(); ++i)
    if (program_->tensors[program_->inputs[i]].name == name) return set_input(i, dtype, dims, data, bytes);
  std::string names;
  for (uint32_t t : program_->inputs) names += (names.empty() ? "" : ", ") + program_->tensors[t].name;
  return make_status(StatusCode::kInvalidArgument, "unknown input '", name, "' (inputs: ", names, ")");
}

Status Session::bind_inputs() {
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (!inputs_[i].set)
      return make_status(StatusCode::kInvalidArgument, "input '",
                         program_->tensors[program_->inputs[i]].name,
                         "' is not set (every input must be set before each run)");
  // Bare-symbol dims bind symbols; then every dim expression must agree with the input.
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const TensorDesc& d = program_->tensors[program_->inputs[i]];
    for (size_t k = 0; k < d.dims.size(); ++k) {
      uint32_t s = eval_->as_symbol(d.dims[k]);
      // The message's source is spelled only when the binding fails.
      if (s != kNone && !eval_->try_bind(s, inputs_[i].dims[k]))
        return eval_->bind(s, inputs_[i].dims[k], "input '" + d.name + "' dim " + std::to_string(k));
    }
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const TensorDesc& d = program_->tensors[program_->inputs[i]];
    for (size_t k = 0; k < d.dims.size(); ++k) {
      int64_t v = 0;
      bool unbound = false;
      CUVIL_RETURN_IF_ERROR(eval_->eval(d.dims[k], &v, &unbound));
      if (unbound)
        return make_status(StatusCode::kShape, "input '", d.name, "' dim ", k, " (",
                           eval_->to_string(d.dims[k]), ") cannot be determined from the inputs");
      if (v != inputs_[i].dims[k])
        return make_status(StatusCode::kShape, "input '", d.name, "' dim ", k, " is ", inputs_[i].dims[k],
                           " but the model requires ", eval_->to_string(d.dims[k]), " = ", v);
    }
  }
  return Status::ok();
}

Status Session::eval_dims(uint32_t t, std::vector<int64_t>* dims, bool* unbound) {
  const TensorDesc& d = program_->tensors[t];
  dims->resize(d.dims.size());
  *unbound = false;
  for (size_t k = 0; k < d.dims.size(); ++k) {
    if (eval_->known(d.dims[k], &(*dims)[k])) continue;  // most dims, in a steady run
    bool u = false;
    CUVIL_RETURN_IF_ERROR(eval_->eval(d.dims[k], &(*dims)[k], &u));
    if (u) *unbound = true;
  }
  return Status::ok();
}

Status Session::prepare_tensors() {
  int64_t arena_size = 0;
  CUVIL_RETURN_IF_ERROR(eval_->eval(program_->arena_size, &arena_size));
  if (arena_size < 0 || static_cast<uint64_t>(arena_size) > kMaxTensorBytes)
    return make_status(StatusCode::kOutOfMemory, "arena of ", arena_size, " bytes is too large");
  arena_bytes_.store(arena_size, std::memory_order_relaxed);
  if (arena_size > arena_peak_bytes_.load(std::memory_order_relaxed))
    arena_peak_bytes_.store(arena_size, std::memory_order_relaxed);
  if (static_cast<size_t>(arena_size) > arena_capacity_) {
    std::free(arena_);
    size_t cap = std::max<size_t>(64, (static_cast<size_t>(arena_size) + 63) / 64 * 64);
    arena_ = static_cast<uint8_t*>(std::aligned_alloc(64, cap));
    if (!arena_) {
      arena_capacity_ = 0;
      return make_status(StatusCode::kOutOfMemory, "cannot allocate an arena of ", arena_size, " bytes");
    }
    arena_capacity_ = cap;
  }
  const uint8_t* weights = package_->weights();
  // A weight's view (constant dims, a pointer into the package) is the same in every run of
  // a program, and nothing but this function writes it: it is made in the first run after
  // the program is activated and kept while the same program runs again.
  const bool weight_views_made = weight_views_program_ == static_cast<int64_t>(active_);
  weight_views_program_ = -1;  // until this function succeeds
  for (uint32_t t = 0; t < program_->tensors.size(); ++t) {
    const TensorDesc& d = program_->tensors[t];
    if (d.kind == TensorKind::kWeight && weight_views_made) {
      ready_[t] = 1;
      continue;
    }
    TensorView& v = views_[t];
    v.dtype = d.dtype;
    v.data = nullptr;
    ready_[t] = 0;
    std::vector<int64_t>& dims = dims_scratch_;  // reused: no allocation per tensor per run
    bool unbound = false;
    switch (d.kind) {
      case TensorKind::kInput: {
        const InputBinding& b = inputs_[d.io_index];
        v.dims = b.dims;
        v.data = const_cast<void*>(b.data);
        ready_[t] = 1;
        break;
      }
      case TensorKind::kWeight:
        CUVIL_RETURN_IF_ERROR(eval_dims(t, &dims, &unbound));
        if (unbound) return make_status(StatusCode::kInvalidPackage, "weight '", d.name, "' has symbolic dims");
        v.dims = dims;
        v.data = const_cast<uint8_t*>(weights + d.weight_offset);
        if (byte_size(d.dtype, dims).value_or(UINT64_MAX) != d.weight_size)
          return make_status(StatusCode::kInvalidPackage, "weight '", d.name, "' size disagrees with its dims");
        ready_[t] = 1;
        break;
      case TensorKind::kIntermediate:
        if (d.arena_offset == kNone) break;  // dynamic: sized when produced
        {
          CUVIL_RETURN_IF_ERROR(eval_dims(t, &dims, &unbound));
          if (unbound) return make_status(StatusCode::kInvalidPackage, "arena tensor '", d.name, "' has unbound dims");
          int64_t off = 0;
          if (!eval_->known(d.arena_offset, &off)) CUVIL_RETURN_IF_ERROR(eval_->eval(d.arena_offset, &off));
          auto bytes = byte_size(d.dtype, dims);
          if (!bytes || off < 0 || !range_within(static_cast<uint64_t>(off), *bytes, static_cast<uint64_t>(arena_size)))
            return make_status(StatusCode::kInvalidPackage, "arena tensor '", d.name, "' at offset ", off,
                               " does not fit the ", arena_size, "-byte arena");
          v.dims = dims;
          v.data = arena_ + off;
        }
        break;
      case TensorKind::kOutput: break;
    }
  }
  weight_views_program_ = static_cast<int64_t>(active_);
  return Status::ok();
}

Status Session::materialize(uint32_t t, const std::vector<int64_t>& dims, const std::string& who) {
  const TensorDesc& d = program_->tensors[t];
  if (dims.size() != d.dims.size())
    return make_status(StatusCode::kShape, who, " produced '", d.name, "' with rank ", dims.size(),
                       " but the compiled shape has rank ", d.dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    int64_t v = 0;
    bool unbound = false;
    CUVIL_RETURN_IF_ERROR(eval_->eval(d.dims[k], &v, &unbound));
    if (unbound) {
      uint32_t s = eval_->as_symbol(d.dims[k]);
      if (s == kNone)
        return make_status(StatusCode::kShape, who, ": dim ", k, " of '", d.name, "' (",
                           eval_->to_string(d.dims[k]), ") depends on a value not known yet");
      if (!eval_->try_bind(s, dims[k])) return eval_->bind(s, dims[k], who + " output '" + d.name + "'");
      CUVIL_RETURN_IF_ERROR(eval_->eval(d.dims[k], &v));
    }
    if (v != dims[k])
      return make_status(StatusCode::kShape, who, " produced '", d.name, "' with shape ", dims_text(dims),
                         " but the compiled shape says dim ", k, " = ", eval_->to_string(d.dims[k]), " = ", v);
  }
  TensorView& view = views_[t];
  if (d.kind == TensorKind::kOutput && ps_->in_place_state[t] != kNone) {
    // A state's present kept in place: the state's own buffer, checked to fit before any
    // kernel writes a row (runtime/state_layout.h).
    StateBuffer& b = state_[ps_->in_place_state[t]];
    CUVIL_RETURN_IF_ERROR(check_present(b, d.dtype, dims));
    view.dims = dims;
    view.data = b.data.data();
    ready_[t] = 1;
    return Status::ok();
  }
  if (d.kind == TensorKind::kIntermediate && d.arena_offset != kNone) {
    ready_[t] = 1;  // storage assigned in prepare_tensors, dims equal by the checks above
    return Status::ok();
  }
  auto bytes = byte_size(d.dtype, dims);
  if (!bytes || *bytes > kMaxTensorBytes)
    return make_status(StatusCode::kOutOfMemory, who, ": '", d.name, "' of shape ", dims_text(dims), " is too large");
  heap_[t].resize(*bytes + 1);  // +1: a valid pointer for empty tensors
  view.dims = dims;
  view.data = heap_[t].data();
  ready_[t] = 1;
  return Status::ok();
}

Status Session::copy_tensor(uint32_t dst, uint32_t src) {
  if (!ready_[src])
    return make_status(StatusCode::kRuntime, "Copy: tensor '", program_->tensors[src].name, "' has no value");
  CUVIL_RETURN_IF_ERROR(materialize(dst, views_[src].dims, "Copy"));
  if (views_[src].bytes()) std::memmove(views_[dst].data, views_[src].data, views_[src].bytes());
  return Status::ok();
}

Status Session::call_op(uint32_t node_index) {
  const NodeRecord& node = program_->nodes[node_index];
  const NodeDispatch& dispatch = *ps_->dispatch[node_index];
  const OpKernelFn fn = dispatch.fn;
  if (!fn)
    return make_status(StatusCode::kUnsupported, "no CPU kernel for op ", node.op_type, " (node '", node.name, "')");
  for (uint32_t in : node.inputs)
    if (in != kNone && !ready_[in])
      return make_status(StatusCode::kRuntime, "node '", node.name, "' reads '", program_->tensors[in].name,
                         "' before it has a value");
  RunOpContext ctx(*this, node, dispatch);
  const int64_t t0 = collect_stats_ ? stats_clock_ns() : 0;
  Status st = fn(ctx);
  if (collect_stats_) stats_.kernel_ns += stats_clock_ns() - t0;
  if (!st.is_ok()) return st;
  for (uint32_t out : node.outputs)
    if (out != kNone && !ready_[out])
      return make_status(StatusCode::kRuntime, node.op_type, " node '", node.name, "' did not produce '",
                         program_->tensors[out].name, "'");
  return Status::ok();
}

Status Session::run_kernel(uint32_t kernel_index) {
  const TileKernel& k = program_->kernels[kernel_index];
  const std::string& who = ps_->kernel_who[kernel_index];
  std::vector<int64_t>& dims = dims_scratch_;
  dims.resize(k.domain.size());
  for (size_t i = 0; i < dims.size(); ++i) CUVIL_RETURN_IF_ERROR(eval_->eval(k.domain[i], &dims[i]));
  // Tensors the body stores get storage with the domain's dims; loaded ones must exist.
  for (size_t pc = 0; pc < k.body.size();) {
    auto op = static_cast<TileOpcode>(k.body[pc]);
    if (op == TileOpcode::Store) {
      uint32_t t = k.maps[k.body[pc + 1]].tensor;
      if (!ready_[t]) {
        const TensorDesc& d = program_->tensors[t];
        if (d.dims.size() == dims.size()) {
          CUVIL_RETURN_IF_ERROR(materialize(t, dims, who));
        } else {
          // A reshaping copy stores over its flattened element count: the tensor takes its
          // compiled dims (bound by now; the bounds proof checks the element count).
          std::vector<int64_t>& own = own_dims_scratch_;
          own.resize(d.dims.size());
          for (size_t i = 0; i < own.size(); ++i) {
            bool unbound = false;
            CUVIL_RETURN_IF_ERROR(eval_->eval(d.dims[i], &own[i], &unbound));
            if (unbound)
              return make_status(StatusCode::kShape, "kernel ", k.name, ": dim ", i, " of '", d.name,
                                 "' depends on a value not known yet");
          }
          CUVIL_RETURN_IF_ERROR(materialize(t, own, who));
        }
      }
    } else if (op == TileOpcode::Load) {
      uint32_t t = k.maps[k.body[pc + 2]].tensor;
      if (!ready_[t])
        return make_status(StatusCode::kRuntime, "kernel ", k.name, " reads '", program_->tensors[t].name,
                           "' before it has a value");
    }
    pc += 1 + std::strlen(tile_opcode_operands(op));
  }
  if (!collect_stats_) return run_tile_kernel(*program_, kernel_index, *eval_, views_, pool_);
  const int64_t t0 = stats_clock_ns();
  Status st = run_tile_kernel(*program_, kernel_index, *eval_, views_, pool_);
  stats_.kernel_ns += stats_clock_ns() - t0;
  return st;
}

Status Session::execute() {
  const std::vector<uint32_t>& code = program_->code;
  size_t pc = 0;
  for (;;) {
    // Before every instruction: a kernel that a stop cut short (its pool skipped chunks) is
    // caught here, before anything reads its output, and so is a loop that never ends.
    if (stop_.should_stop()) return stopped_at(pc, "before");
    auto op = static_cast<Opcode>(code[pc]);
    ++stats_.instructions;
    Status st;
    switch (op) {
      case Opcode::End: return Status::ok();
      case Opcode::CallOp:
        ++stats_.kernel_calls;
        if (tracing_) {
          const int64_t t0 = trace_clock_ns();
          st = call_op(code[pc + 1]);
          trace_kernel_call(true, code[pc + 1], static_cast<uint32_t>(pc), t0);
        } else {
          st = call_op(code[pc + 1]);
        }
        break;
      case Opcode::RunKernel:
        ++stats_.kernel_calls;
        if (tracing_) {
          const int64_t t0 = trace_clock_ns();
          st = run_kernel(code[pc + 1]);
          trace_kernel_call(false, code[pc + 1], static_cast<uint32_t>(pc), t0);
        } else {
          st = run_kernel(code[pc + 1]);
        }
        break;
      case Opcode::Jump:
        pc = code[pc + 1];
        continue;
      case Opcode::JumpIfFalse: {
        uint32_t t = code[pc + 1];
        const TensorView& v = views_[t];
        if (!ready_[t] || v.numel() < 1)
          return make_status(StatusCode::kRuntime, "branch condition '", program_->tensors[t].name, "' has no value");
        bool truth = false;
        switch (v.dtype) {
          case DType::Bool: case DType::UInt8: case DType::Int8: truth = *v.as<uint8_t>() != 0; break;
          case DType::Int32: truth = *v.as<int32_t>() != 0; break;
          case DType::Int64: truth = *v.as<int64_t>() != 0; break;
          case DType::Float: truth = *v.as<float>() != 0.f; break;
          default: return make_status(StatusCode::kRuntime, "branch condition has dtype ", dtype_name(v.dtype));
        }
        if (!truth) {
          pc = code[pc + 2];
          continue;
        }
        break;
      }
      case Opcode::Copy: CUVIL_RETURN_IF_ERROR(copy_tensor(code[pc + 1], code[pc + 2])); break;
      case Opcode::LoopInit: CUVIL_RETURN_IF_ERROR(loop_init(code[pc + 1])); break;
      case Opcode::LoopTest: {
        bool done = false;
        CUVIL_RETURN_IF_ERROR(loop_test(code[pc + 1], &done));
        if (done) {
          pc = code[pc + 2];
          continue;
        }
        break;
      }
      case Opcode::LoopNext:
        CUVIL_RETURN_IF_ERROR(loop_next(code[pc + 1]));
        pc = code[pc + 2];
        continue;
      case Opcode::LoopExit: CUVIL_RETURN_IF_ERROR(loop_exit(code[pc + 1])); break;
      case Opcode::kCount: return make_status(StatusCode::kInvalidPackage, "bad opcode at ", pc);
    }
    // A kernel that a stop cut short (its pool skipped chunks) ends the run here, before
    // anything reads its outputs; if it failed, that may come from its partial data, so the
    // stop is the cause to report.
    if ((op == Opcode::CallOp || op == Opcode::RunKernel) && stop_.stopped()) return stopped_at(pc, "in");
    if (!st.is_ok()) return st;
    pc += 1 + std::strlen(opcode_operands(op));
  }
}

Status Session::stopped_at(size_t pc, const char* before_or_in) const {
  const auto op = static_cast<Opcode>(program_->code[pc]);
  std::string where = std::string(before_or_in) + " instruction " + std::to_string(pc) + " (" + opcode_name(op);
  if (op == Opcode::CallOp) where += " node '" + program_->nodes[program_->code[pc + 1]].name + "'";
  if (op == Opcode::RunKernel) where += " kernel " + program_->kernels[program_->code[pc + 1]].name;
  return stop_.status(where + ")");
}

Status Session::run() {
  last_run_ok_ = false;
  eval_->reset();
  stop_.begin(options_.deadline_ms);
  stats_ = RunStats{};
  // The one check of the trace flag per run: the pool reads its span pointer once per
  // parallel_for, execute() this flag once per kernel call.
  tracing_ = trace_enabled_ && trace_;
  if (tracing_) {
    spans_.assign(static_cast<size_t>(pool_.threads()), WorkerSpan{});
    pool_.set_spans(spans_.data());
    trace_run_ = trace_->next_run();
  }
  // The run counters need the time of every run: two clock reads per run.
  const int64_t start_ns = stats_clock_ns();
  Status st = [this, start_ns]() -> Status {
    // Bind with the program that ran last (usually the one that runs again), then choose.
    if (!state_.empty()) CUVIL_RETURN_IF_ERROR(bind_states());
    CUVIL_RETURN_IF_ERROR(bind_inputs());
    if (states_.size() > 1) {
      const size_t chosen = select_program();
      if (chosen != active_) {
        activate(chosen);
        eval_->reset();
        CUVIL_RETURN_IF_ERROR(bind_inputs());
      }
    }
    last_program_.store(static_cast<int>(active_), std::memory_order_relaxed);
    CUVIL_RETURN_IF_ERROR(prepare_tensors());
    if (collect_stats_ || tracing_) {
      const int64_t now = stats_clock_ns();
      if (collect_stats_) stats_.bind_ns = now - start_ns;
      if (tracing_) trace_run_span(TraceEvent::Kind::kBind, start_ns, now, 0);
    }
    CUVIL_RETURN_IF_ERROR(execute());
    for (uint32_t t : program_->outputs)
      if (!ready_[t])
        return make_status(StatusCode::kRuntime, "output '", program_->tensors[t].name, "' was not produced");
    // The one place the state changes: only a run that got this far commits.
    if (!state_.empty()) CUVIL_RETURN_IF_ERROR(commit_states());
    return Status::ok();
  }();
  // Input data is borrowed only until run() returns (cuvil.h): forget it, whatever the
  // outcome, so that a later run can never read a buffer the caller has since freed.
  for (InputBinding& b : inputs_) {
    b.set = false;
    b.data = nullptr;
    b.bytes = 0;
  }
  for (uint32_t t : program_->inputs) views_[t].data = nullptr;
  const int64_t end_ns = stats_clock_ns();
  if (collect_stats_) stats_.total_ns = end_ns - start_ns;
  if (tracing_) {
    trace_run_span(TraceEvent::Kind::kRun, start_ns, end_ns, static_cast<int32_t>(st.code()));
    pool_.set_spans(nullptr);
    tracing_ = false;
  }
  runs_.fetch_add(1, std::memory_order_relaxed);
  if (!st.is_ok()) failures_.fetch_add(1, std::memory_order_relaxed);
  run_ns_.fetch_add(end_ns - start_ns, std::memory_order_relaxed);
  stop_.end();
  last_run_ok_ = st.is_ok();
  return st;
}

const TensorView* Session::output(size_t index) {
  if (!last_run_ok_ || index >= program_->outputs.size()) return nullptr;
  const uint32_t t = program_->outputs[index];
  const uint32_t state = ps_->in_place_state[t];
  return state == kNone ? &views_[t] : packed_present(state);
}

// The last run's present of in-place state `index`, packed into the output's own storage on
// its first read: in the state's buffer its rows are `capacity` apart. Rows [0, T) stay as the
// run left them until the next run (which writes only after them) or write_state (which packs
// first).
const TensorView* Session::packed_present(uint32_t index) {
  StateBuffer& b = state_[index];
  const uint32_t t = program_->outputs[b.record->output];
  TensorView& v = views_[t];
  if (!b.present_packed) {
    const RowBlocks blocks = row_blocks(v.dtype, v.dims, b.record->axis);
    heap_[t].resize(v.bytes() + 1);  // within the reserved capacity
    copy_row_blocks(blocks, heap_[t].data(), blocks.rows, b.data.data(), b.capacity);
    v.data = heap_[t].data();
    b.present_packed = true;
  }
  return &v;
}

}  // namespace cuvil::rt
