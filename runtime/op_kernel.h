// Whole-tensor CPU kernels: ops that are not (yet) tile programs run as one call over whole
// tensors, invoked by the CALL_OP instruction. Kernels are found through the ONNX op table
// (ir/ops.def): the kernel for op `Name` is `Status kernel_Name(OpContext&)` in namespace
// cuvil::rt::ops, defined in runtime/cpu/ops/<family>.cpp. An op without a definition has no
// kernel (the compiler refuses it, listing every such op).
//
// A kernel reads its inputs and attributes, computes its output shapes itself, and asks the
// context for each output buffer with `allocate_output`. The runtime checks the shape it asks
// for against the compiler's symbolic shape (a mismatch is an error) and binds symbols of
// data-dependent dims (NonZero, Unique, ...). Kernels must validate data-dependent indices
// (Gather, Scatter, OneHot ...) and return kRuntime errors naming the op and the index; they
// must never read or write outside the views they are given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "runtime/status.h"

namespace cuvil::rt {

// A dense, row-major tensor in memory.
struct TensorView {
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;
  void* data = nullptr;  // may be null when numel == 0
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  size_t bytes() const { return static_cast<size_t>((numel() * dtype_bits(dtype) + 7) / 8); }
  template <typename T> T* as() { return static_cast<T*>(data); }
  template <typename T> const T* as() const { return static_cast<const T*>(data); }
};

// Attribute values of a node, decoded from the package. Lookups by name; defaults as in ONNX.
// The session remembers each lookup by the name's address (runtime/session.cpp), so a name
// must be a string literal or otherwise keep its address and spelling for the session's life
// (never the c_str() of a temporary).
class AttrReader {
 public:
  virtual ~AttrReader() = default;
  virtual bool has(const char* name) const = 0;
  virtual int64_t get_int(const char* name, int64_t fallback) const = 0;
  virtual float get_float(const char* name, float fallback) const = 0;
  virtual std::string get_string(const char* name, const std::string& fallback) const = 0;
  // Empty when absent.
  virtual std::vector<int64_t> get_ints(const char* name) const = 0;
  virtual std::vector<float> get_floats(const char* name) const = 0;
  virtual std::vector<std::string> get_strings(const char* name) const = 0;
  // Tensor attribute (e.g. ConstantOfShape value); nullptr when absent.
  virtual const TensorView* get_tensor(const char* name) const = 0;
};

class OpContext {
 public:
  virtual ~OpContext() = default;
  virtual const char* op_name() const = 0;    // ONNX op_type
  virtual const char* node_name() const = 0;  // for messages
  virtual int opset() const = 0;
  virtual const AttrReader& attrs() const = 0;
  virtual size_t num_inputs() const = 0;
  // nullptr for an omitted optional input.
  virtual const TensorView* input(size_t i) const = 0;
  virtual size_t num_outputs() const = 0;
  virtual bool output_wanted(size_t i) const = 0;  // false for omitted optional outputs
  // Returns the buffer for output i with these dims (zero-initialised is NOT guaranteed).
  // On a shape that contradicts the compiled shape, returns an error status instead.
  virtual Status allocate_output(size_t i, DType dtype, const std::vector<int64_t>& dims,
                                 TensorView** out) = 0;
  // For an input bound to a session state kept in place (runtime/state_layout.h): the rows
  // its buffer holds per leading index (the state's maximum length), which is then the row
  // stride of the view, not dims[2]; 0 for every other input (dense, row-major). The state's
  // present output is allocated in the same buffer (its first dims[2] rows are the input's),
  // and the kernel may write only the rows after those.
  virtual int64_t cache_capacity(size_t /*input*/) const { return 0; }
  // Number of worker threads a kernel may use through parallel_for (>= 1).
  virtual int threads() const = 0;
  // Runs fn(begin, end) over [0, n) split into chunks across the worker threads. When the
  // run's deadline passes or it is cancelled, the remaining chunks are skipped; the session
  // then fails the run before anything reads this node's outputs, so a kernel needs no check
  // of its own (it must only not trust what a parallel_for wrote, as ever, for bounds).
  virtual void parallel_for(int64_t n, int64_t grain,
                            void (*fn)(void* arg, int64_t begin, int64_t end), void* arg) = 0;

  template <typename... Parts>
  Status error(StatusCode code, const Parts&... parts) const {
    return make_status(code, op_name(), " node '", node_name(), "': ", parts...);
  }
};

using OpKernelFn = Status (*)(OpContext&);

namespace ops {
// One declaration per op in the table; definitions live in runtime/cpu/ops/*.cpp. Weak, so an
// op whose kernel is not written yet links as a null entry ("no kernel").
#define CUVIL_OP(name, domain, rule, flags) Status kernel_##name(OpContext& ctx) __attribute__((weak));
#include "ir/ops.def"
#undef CUVIL_OP
}  // namespace ops

// The kernel for an ONNX op name in the default domain (or the listed domain); nullptr when
// cuvil has no CPU kernel for it.
OpKernelFn find_op_kernel(const std::string& domain, const std::string& op_type);

}  // namespace cuvil::rt
