// Program-level loops: the LoopInit / LoopTest / LoopNext / LoopExit instructions that run an
// ONNX Loop or Scan whose body the compiler inlined between LoopTest and LoopNext
// (docs/isa.md "Loops"). Loop-carried values live in the loop record's state tensors; an
// iteration starts by forgetting its per-iteration symbols and tensors, so a body may produce
// different shapes in different iterations, and every shape is checked again as it is
// produced. Scan outputs are collected per iteration and stacked by LoopExit.
#include <cstring>

#include "runtime/session.h"
#include "support/checked.h"

namespace cuvil::rt {
namespace {

bool is_loop_tensor(const LoopDesc& l, uint32_t t) {
  if (t == l.counter || t == l.cond) return true;
  for (uint32_t s : l.state)
    if (s == t) return true;
  return false;
}

int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t k = begin; k < end; ++k) n *= dims[k];  // dims come from checked tensors
  return n;
}

}  // namespace

void Session::start_iteration(const LoopDesc& l) {
  eval_->unbind(l.symbols);
  for (uint32_t t : l.tensors) ready_[t] = 0;
}

Status Session::read_scalar(uint32_t t, const char* what, int64_t* value) {
  const TensorView& v = views_[t];
  if (!ready_[t] || v.numel() != 1)
    return make_status(StatusCode::kRuntime, "loop ", what, " '", program_->tensors[t].name,
                       "' has no value or is not a single element");
  switch (v.dtype) {
    case DType::Bool: case DType::UInt8: *value = *v.as<uint8_t>(); return Status::ok();
    case DType::Int8: *value = *v.as<int8_t>(); return Status::ok();
    case DType::Int16: *value = *v.as<int16_t>(); return Status::ok();
    case DType::UInt16: *value = *v.as<uint16_t>(); return Status::ok();
    case DType::Int32: *value = *v.as<int32_t>(); return Status::ok();
    case DType::UInt32: *value = *v.as<uint32_t>(); return Status::ok();
    case DType::Int64: *value = *v.as<int64_t>(); return Status::ok();
    case DType::UInt64: {
      const uint64_t u = *v.as<uint64_t>();
      *value = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
      return Status::ok();
    }
    default:
      return make_status(StatusCode::kRuntime, "loop ", what, " '", program_->tensors[t].name,
                         "' has dtype ", dtype_name(v.dtype));
  }
}

// Gives `t` storage for `dims` (binding its symbols) and copies the bytes in.
Status Session::write_tensor(uint32_t t, const std::vector<int64_t>& dims, const void* data,
                             const std::string& who) {
  CUVIL_RETURN_IF_ERROR(materialize(t, dims, who));
  const size_t bytes = views_[t].bytes();
  if (bytes && views_[t].data != data) std::memmove(views_[t].data, data, bytes);
  return Status::ok();
}

Status Session::loop_init(uint32_t li) {
  const LoopDesc& l = program_->loops[li];
  const std::string& who = ps_->loops[li].who;
  start_iteration(l);
  LoopRun& run = ps_->loops[li];
  run.slices.assign(l.scan_outputs.size(), {});
  run.slice_dims.assign(l.scan_outputs.size(), {});
  run.count = 0;
  std::vector<int64_t> dims;
  bool unbound = false;
  CUVIL_RETURN_IF_ERROR(eval_dims(l.counter, &dims, &unbound));
  const int64_t zero = 0;
  CUVIL_RETURN_IF_ERROR(write_tensor(l.counter, dims, &zero, ps_->loops[li].who_counter));
  if (l.cond != kNone) {
    int64_t c = 1;
    if (l.cond_init != kNone) CUVIL_RETURN_IF_ERROR(read_scalar(l.cond_init, "condition", &c));
    const uint8_t b = c != 0;
    CUVIL_RETURN_IF_ERROR(eval_dims(l.cond, &dims, &unbound));
    CUVIL_RETURN_IF_ERROR(write_tensor(l.cond, dims, &b, ps_->loops[li].who_condition));
  }
  for (size_t i = 0; i < l.state.size(); ++i) {
    const uint32_t src = l.init[i];
    if (!ready_[src])
      return make_status(StatusCode::kRuntime, who, ": initial value '", program_->tensors[src].name,
                         "' has no value");
    CUVIL_RETURN_IF_ERROR(write_tensor(l.state[i], views_[src].dims, views_[src].data, ps_->loops[li].who_state));
  }
  return Status::ok();
}

Status Session::loop_test(uint32_t li, bool* done) {
  const LoopDesc& l = program_->loops[li];
  const std::string& who = ps_->loops[li].who;
  int64_t i = 0;
  CUVIL_RETURN_IF_ERROR(read_scalar(l.counter, "counter", &i));
  *done = false;
  if (l.kind == LoopKind::kLoop) {
    if (l.max_trips != kNone) {
      int64_t m = 0;
      CUVIL_RETURN_IF_ERROR(read_scalar(l.max_trips, "trip count", &m));
      if (i >= m) *done = true;
    }
    if (l.cond_init != kNone) {
      int64_t c = 0;
      CUVIL_RETURN_IF_ERROR(read_scalar(l.cond, "condition", &c));
      if (c == 0) *done = true;
    }
    return Status::ok();
  }
  // Scan: as many iterations as the scan inputs are long; each iteration gets its slices.
  int64_t len = -1;
  for (const LoopScanInput& in : l.scan_inputs) {
    if (!ready_[in.source])
      return make_status(StatusCode::kRuntime, who, ": scan input '", program_->tensors[in.source].name,
                         "' has no value");
    const int64_t n = views_[in.source].dims[in.axis];
    if (len >= 0 && n != len)
      return make_status(StatusCode::kShape, who, ": scan inputs have different lengths (", len,
                         " and ", n, " for '", program_->tensors[in.source].name, "')");
    len = n;
  }
  if (len < 0 || i >= len) {
    *done = true;
    return Status::ok();
  }
  for (const LoopScanInput& in : l.scan_inputs) {
    const TensorView& src = views_[in.source];
    std::vector<int64_t> dims = src.dims;
    dims.erase(dims.begin() + in.axis);
    CUVIL_RETURN_IF_ERROR(materialize(in.slice, dims, ps_->loops[li].who_scan_input));
    const int64_t index = in.reverse ? len - 1 - i : i;
    const size_t elem = static_cast<size_t>(dtype_bits(src.dtype) / 8);
    const int64_t outer = product(src.dims, 0, in.axis);
    const size_t inner = static_cast<size_t>(product(src.dims, in.axis + 1, src.dims.size())) * elem;
    auto* dst = static_cast<uint8_t*>(views_[in.slice].data);
    const auto* from = static_cast<const uint8_t*>(src.data);
    if (inner == 0) continue;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + static_cast<size_t>(o) * inner,
                  from + static_cast<size_t>(o * len + index) * inner, inner);
  }
  return Status::ok();
}

Status Session::loop_next(uint32_t li) {
  const LoopDesc& l = program_->loops[li];
  const std::string& who = ps_->loops[li].who;
  LoopRun& run = ps_->loops[li];
  if (run.slices.size() != l.scan_outputs.size())
    return make_status(StatusCode::kRuntime, who, ": LoopNext before LoopInit");
  int64_t i = 0;
  CUVIL_RETURN_IF_ERROR(read_scalar(l.counter, "counter", &i));
  // Scan outputs: every iteration's slice must have the same shape.
  for (size_t k = 0; k < l.scan_outputs.size(); ++k) {
    const uint32_t t = l.scan_outputs[k].body;
    if (!ready_[t])
      return make_status(StatusCode::kRuntime, who, ": scan output '", program_->tensors[t].name,
                         "' has no value");
    const TensorView& v = views_[t];
    if (run.count == 0) {
      run.slice_dims[k] = v.dims;
    } else if (run.slice_dims[k] != v.dims) {
      return make_status(StatusCode::kShape, who, ": scan output '", program_->tensors[t].name,
                         "' changes shape between iterations");
    }
    const auto* b = static_cast<const uint8_t*>(v.data);
    if (run.slices[k].size() + v.bytes() > (uint64_t{1} << 40))
      return make_status(StatusCode::kOutOfMemory, who, ": scan output '", program_->tensors[t].name,
                         "' grows too large");
    run.slices[k].insert(run.slices[k].end(), b, b + v.bytes());
  }
  ++run.count;
  // The next values; a body output that is itself a loop tensor (a value passed through or
  // swapped) is copied first, since writing the state overwrites it.
  struct Next {
    std::vector<int64_t> dims;
    const void* data;
    std::vector<uint8_t> held;
  };
  std::vector<Next> next(l.state.size());
  for (size_t s = 0; s < l.state.size(); ++s) {
    const uint32_t t = l.next[s];
    if (!ready_[t])
      return make_status(StatusCode::kRuntime, who, ": next value '", program_->tensors[t].name,
                         "' has no value");
    next[s].dims = views_[t].dims;
    next[s].data = views_[t].data;
    if (is_loop_tensor(l, t)) {
      const auto* b = static_cast<const uint8_t*>(views_[t].data);
      next[s].held.assign(b, b + views_[t].bytes());
      next[s].data = next[s].held.data();
    }
  }
  int64_t cond = 1;
  if (l.cond_next != kNone) CUVIL_RETURN_IF_ERROR(read_scalar(l.cond_next, "condition", &cond));
  if (l.cond != kNone && !ready_[l.cond])
    return make_status(StatusCode::kRuntime, who, ": condition '", program_->tensors[l.cond].name,
                       "' has no value (LoopNext before LoopInit?)");
  start_iteration(l);
  for (size_t s = 0; s < l.state.size(); ++s)
    CUVIL_RETURN_IF_ERROR(write_tensor(l.state[s], next[s].dims, next[s].data, ps_->loops[li].who_state));
  auto counter = checked_add(i, 1);
  if (!counter) return make_status(StatusCode::kRuntime, who, ": iteration counter overflows");
  *views_[l.counter].as<int64_t>() = *counter;
  if (l.cond != kNone) *views_[l.cond].as<uint8_t>() = cond != 0;
  return Status::ok();
}

Status Session::loop_exit(uint32_t li) {
  const LoopDesc& l = program_->loops[li];
  const std::string& who = ps_->loops[li].who;
  const LoopRun& run = ps_->loops[li];
  if (run.slices.size() != l.scan_outputs.size())
    return make_status(StatusCode::kRuntime, who, ": LoopExit before LoopInit");
  for (size_t s = 0; s < l.state.size(); ++s) {
    if (l.final[s] == kNone) continue;
    const uint32_t t = l.state[s];
    if (!ready_[t])
      return make_status(StatusCode::kRuntime, who, ": state '", program_->tensors[t].name, "' has no value");
    CUVIL_RETURN_IF_ERROR(write_tensor(l.final[s], views_[t].dims, views_[t].data, ps_->loops[li].who_result));
  }
  for (size_t k = 0; k < l.scan_outputs.size(); ++k) {
    const LoopScanOutput& o = l.scan_outputs[k];
    if (o.stacked == kNone) continue;
    std::vector<int64_t> slice = run.slice_dims[k];
    if (run.count == 0) {
      // No iteration ran: the slice shape is what the compiled shape says, 0 where unknown.
      std::vector<int64_t> dims;
      bool unbound = false;
      CUVIL_RETURN_IF_ERROR(eval_dims(o.stacked, &dims, &unbound));
      slice.clear();
      for (size_t d = 0; d < dims.size(); ++d) {
        if (d == o.axis) continue;
        int64_t v = 0;
        bool u = false;
        CUVIL_RETURN_IF_ERROR(eval_->eval(program_->tensors[o.stacked].dims[d], &v, &u));
        slice.push_back(u ? 0 : v);
      }
    }
    std::vector<int64_t> dims = slice;
    dims.insert(dims.begin() + o.axis, run.count);
    CUVIL_RETURN_IF_ERROR(materialize(o.stacked, dims, ps_->loops[li].who_scan_output));
    const size_t elem = static_cast<size_t>(dtype_bits(views_[o.stacked].dtype) / 8);
    const int64_t outer = product(slice, 0, o.axis);
    const size_t inner = static_cast<size_t>(product(slice, o.axis, slice.size())) * elem;
    const size_t slice_bytes = static_cast<size_t>(outer) * inner;
    auto* dst = static_cast<uint8_t*>(views_[o.stacked].data);
    if (inner == 0) continue;
    for (int64_t j = 0; j < run.count; ++j) {
      const int64_t pos = o.reverse ? run.count - 1 - j : j;
      const uint8_t* src = run.slices[k].data() + static_cast<size_t>(j) * slice_bytes;
      for (int64_t q = 0; q < outer; ++q)
        std::memcpy(dst + static_cast<size_t>(q * run.count + pos) * inner,
                    src + static_cast<size_t>(q) * inner, inner);
    }
  }
  return Status::ok();
}

}  // namespace cuvil::rt
