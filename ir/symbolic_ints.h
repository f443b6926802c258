// The op cuvil::SymbolicInts: a small integer tensor whose elements are symbolic expressions
// over the dims of its inputs, e.g. the [batch*seq, 12, 64] a Reshape reads, which exporters
// compute with Shape -> Gather -> Unsqueeze -> Concat chains (passes/shape_arithmetic.h
// replaces such chains by one of these). This header is the one description of its
// attributes; the shape rule (over DimExpr) and the CPU kernel (over int64) both evaluate
// them with `evaluate` below.
//
// Attributes (all ints):
//   dims     [input, axis, input, axis, ...]: slot k reads dim `axis` of input `input`
//   code     the elements' postfix programs, concatenated, two ints per step: (Code, value);
//            value is the constant for kConst and the slot for kSlot, unused otherwise
//   lengths  steps per element
//   shape    the output's dims: [] (a scalar) or [n] with n = the number of elements
//   to       the output dtype (ONNX TensorProto code): 7 (int64) or 6 (int32)
// Binary steps pop b then a and push (a op b); kFloorDiv and kMod follow Python's signs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cuvil::symints {

enum Code : int64_t { kConst = 0, kSlot = 1, kAdd = 2, kMul = 3, kFloorDiv = 4, kMod = 5, kMin = 6, kMax = 7 };

constexpr size_t kMaxStack = 64;
constexpr int64_t kMaxElements = 1024;

// Evaluates every element. `ops` provides T add(T, T), mul, floordiv, mod, min, max (each may
// set an error and return anything), T constant(int64_t), and bool failed(). Returns "" or
// what is malformed.
template <typename T, typename Ops>
std::string evaluate(const std::vector<int64_t>& code, const std::vector<int64_t>& lengths,
                     const std::vector<T>& slots, Ops& ops, std::vector<T>* out) {
  if (code.size() % 2 != 0) return "code has an odd number of ints";
  if (static_cast<int64_t>(lengths.size()) > kMaxElements) return "too many elements";
  size_t pos = 0;
  for (int64_t len : lengths) {
    if (len < 1 || static_cast<uint64_t>(len) > (code.size() - pos) / 2) return "lengths do not match code";
    std::vector<T> stack;
    for (int64_t s = 0; s < len; ++s, pos += 2) {
      const int64_t kind = code[pos], value = code[pos + 1];
      if (kind == kConst || kind == kSlot) {
        if (stack.size() >= kMaxStack) return "expression deeper than the stack";
        if (kind == kSlot && (value < 0 || static_cast<uint64_t>(value) >= slots.size())) return "slot out of range";
        stack.push_back(kind == kConst ? ops.constant(value) : slots[static_cast<size_t>(value)]);
        continue;
      }
      if (kind < kAdd || kind > kMax) return "unknown step " + std::to_string(kind);
      if (stack.size() < 2) return "step without operands";
      T b = stack.back();
      stack.pop_back();
      T a = stack.back();
      stack.pop_back();
      switch (kind) {
        case kAdd: stack.push_back(ops.add(a, b)); break;
        case kMul: stack.push_back(ops.mul(a, b)); break;
        case kFloorDiv: stack.push_back(ops.floordiv(a, b)); break;
        case kMod: stack.push_back(ops.mod(a, b)); break;
        case kMin: stack.push_back(ops.min(a, b)); break;
        default: stack.push_back(ops.max(a, b)); break;
      }
      if (ops.failed()) return "";
    }
    if (stack.size() != 1) return "an element leaves more than one value";
    out->push_back(stack.back());
  }
  if (pos != code.size()) return "lengths do not match code";
  return "";
}

}  // namespace cuvil::symints
