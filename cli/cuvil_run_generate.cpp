// cuvil-run --generate (cli/cuvil_run_generate.h): the greedy loop over the C API's state
// calls. The prompt is one prefill run; every later step is one run of a single token.
#include "cli/cuvil_run_generate.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

namespace cuvil::tools {
namespace {

constexpr int kExitUsage = 2, kExitRun = 6;
constexpr int32_t kF32 = 1, kI32 = 6, kI64 = 7;

int error(const std::string& msg, int code) {
  std::cerr << "cuvil-run: error: --generate: " << msg << "\n";
  return code;
}

int status_error(const std::string& what, cuvil_status st) {
  const cuvil_status_code c = cuvil_status_code_of(st);
  const std::string msg = what + ": " + cuvil_status_message(st);
  cuvil_status_free(st);
  return error(msg, c == CUVIL_INVALID_ARGUMENT || c == CUVIL_SHAPE ? kExitUsage : kExitRun);
}

// An int64 or int32 tensor of `dims` with values from `value(b, s)`.
HostTensor int_tensor(int32_t dtype, int64_t rows, int64_t cols, int64_t (*value)(int64_t, int64_t, int64_t),
                      int64_t arg) {
  HostTensor t;
  t.dtype = dtype;
  t.dims = {rows, cols};
  const size_t esize = dtype == kI64 ? 8 : 4;
  t.bytes.resize(static_cast<size_t>(rows * cols) * esize);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t s = 0; s < cols; ++s) {
      const int64_t v = value(b, s, arg);
      uint8_t* p = t.bytes.data() + static_cast<size_t>(b * cols + s) * esize;
      if (esize == 8) {
        std::memcpy(p, &v, 8);
      } else {
        const int32_t w = static_cast<int32_t>(v);
        std::memcpy(p, &w, 4);
      }
    }
  return t;
}

}  // namespace

int run_generate(cuvil_model* model, cuvil_session* session, std::map<std::string, HostTensor>& host, int tokens) {
  if (cuvil_model_state_count(model) == 0)
    return error("the package has no state (KV cache): compile a decoder whose present outputs are Concat(past, new) "
                 "with a bounded past range, e.g. cuvilc compile model.onnx --dim past=0:2048 (docs/kv_cache.md)",
                 kExitUsage);
  // The inputs: input_ids from the caller; attention_mask and position_ids filled here when the
  // model has them (unless given); the states bound by the session; nothing else.
  const size_t n_in = cuvil_model_input_count(model);
  std::vector<bool> is_state(n_in, false), is_state_output(cuvil_model_output_count(model), false);
  for (size_t i = 0; i < cuvil_model_state_count(model); ++i) {
    cuvil_state_info s;
    if (cuvil_status st = cuvil_model_state_info(model, i, &s)) return status_error("state info", st);
    is_state[s.input_index] = true;
    is_state_output[s.output_index] = true;
  }
  bool has_mask = false, has_positions = false, has_ids = false;
  int32_t mask_dtype = kI64, positions_dtype = kI64, ids_dtype = kI64;
  for (size_t i = 0; i < n_in; ++i) {
    if (is_state[i]) continue;
    cuvil_tensor_info info;
    if (cuvil_status st = cuvil_model_input_info(model, i, &info)) return status_error("input info", st);
    const std::string name = info.name;
    const bool int_2d = info.rank == 2 && (info.dtype == kI64 || info.dtype == kI32);
    if (name == "input_ids" && int_2d) {
      has_ids = true;
      ids_dtype = info.dtype;
    } else if (name == "attention_mask" && int_2d) {
      has_mask = true;
      mask_dtype = info.dtype;
    } else if (name == "position_ids" && int_2d) {
      has_positions = true;
      positions_dtype = info.dtype;
    } else {
      return error("input '" + name + "' " + info.shape + " is neither input_ids, attention_mask nor position_ids "
                   "(int64 or int32, rank 2), which --generate fills", kExitUsage);
    }
  }
  if (!has_ids) return error("the model has no input_ids input (int64 or int32 [batch, seq])", kExitUsage);
  auto ids_it = host.find("input_ids");
  if (ids_it == host.end()) return error("give the prompt as --input input_ids=prompt.npy", kExitUsage);
  const HostTensor prompt = ids_it->second;
  if (prompt.dtype != ids_dtype || prompt.dims.size() != 2 || prompt.dims[1] < 1)
    return error("input_ids must be " + std::string(cuvil_dtype_name(ids_dtype)) +
                 " [batch, seq] with seq >= 1 (the prompt)", kExitUsage);
  const int64_t batch = prompt.dims[0];
  // The logits: an output named logits, else the one f32 rank-3 output that is not a state's.
  size_t logits = SIZE_MAX;
  for (size_t i = 0; i < cuvil_model_output_count(model); ++i) {
    cuvil_tensor_info info;
    if (cuvil_status st = cuvil_model_output_info(model, i, &info)) return status_error("output info", st);
    if (is_state_output[i] || info.dtype != kF32 || info.rank != 3) continue;
    if (std::string(info.name) == "logits" || logits == SIZE_MAX) logits = i;
  }
  if (logits == SIZE_MAX)
    return error("the model has no logits-like output (f32 [batch, seq, vocab] that is not a present output)",
                 kExitUsage);

  if (cuvil_status st = cuvil_session_reset_state(session)) return status_error("reset state", st);
  std::vector<std::vector<int64_t>> generated(static_cast<size_t>(batch));
  const std::map<std::string, HostTensor> given = host;  // the caller's inputs, for the prefill
  // Binds step `step`'s inputs (ids after `length` cached tokens) and runs it; 0 or an exit code.
  auto run_step = [&](int step, const HostTensor& ids, int64_t length) {
    const int64_t seq = ids.dims[1];
    host["input_ids"] = ids;
    if (has_mask && (step > 0 || !given.count("attention_mask")))
      host["attention_mask"] = int_tensor(mask_dtype, batch, length + seq, [](int64_t, int64_t, int64_t) -> int64_t { return 1; }, 0);
    if (has_positions && (step > 0 || !given.count("position_ids")))
      host["position_ids"] =
          int_tensor(positions_dtype, batch, seq, [](int64_t, int64_t s, int64_t from) { return from + s; }, length);
    for (auto& [name, t] : host)
      if (cuvil_status st = cuvil_session_set_input(session, name.c_str(), t.dtype, static_cast<int32_t>(t.dims.size()),
                                                    t.dims.data(), t.bytes.data(), t.bytes.size()))
        return status_error("step " + std::to_string(step) + ": input '" + name + "'", st);
    if (cuvil_status st = cuvil_session_run(session))
      return status_error("step " + std::to_string(step) + " (cache length " + std::to_string(length) + ")", st);
    return 0;
  };
  // The argmax (the first maximum, as numpy's) of each row's last-position logits.
  auto last_argmax = [&](std::vector<int64_t>* best) {
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    if (cuvil_status st = cuvil_session_get_output(session, logits, &info, &data, &bytes))
      return status_error("logits", st);
    const int64_t rows = info.dims[1], vocab = info.dims[2];
    if (info.dims[0] != batch || rows < 1 || vocab < 1)
      return error("logits have shape " + std::string(info.shape) + ", expected [" + std::to_string(batch) +
                   ", seq, vocab]", kExitRun);
    best->assign(static_cast<size_t>(batch), 0);
    for (int64_t b = 0; b < batch; ++b) {
      const float* row = static_cast<const float*>(data) + (b * rows + rows - 1) * vocab;
      for (int64_t v = 1; v < vocab; ++v)
        if (row[v] > row[(*best)[b]]) (*best)[b] = v;
    }
    return 0;
  };
  HostTensor ids = prompt;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double first_ms = 0;
  for (int step = 0; step < tokens; ++step) {
    int64_t length = 0;
    if (cuvil_status st = cuvil_session_state_length(session, &length)) return status_error("state length", st);
    if (int rc = run_step(step, ids, length)) return rc;
    std::vector<int64_t> best;
    if (int rc = last_argmax(&best)) return rc;
    HostTensor next;
    next.dtype = ids_dtype;
    next.dims = {batch, 1};
    next.bytes.resize(static_cast<size_t>(batch) * (ids_dtype == kI64 ? 8 : 4));
    for (int64_t b = 0; b < batch; ++b) {
      generated[static_cast<size_t>(b)].push_back(best[b]);
      if (ids_dtype == kI64) {
        std::memcpy(next.bytes.data() + b * 8, &best[b], 8);
      } else {
        const int32_t w = static_cast<int32_t>(best[b]);
        std::memcpy(next.bytes.data() + b * 4, &w, 4);
      }
    }
    ids = std::move(next);
    if (step == 0) first_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  // The same prefill once more in this session, its cache reset: what the first token costs
  // once every one-time cost (packing, page faults, arena growth) has been paid. Its outputs
  // are not printed; the ids above are the first run's.
  if (cuvil_status st = cuvil_session_reset_state(session)) return status_error("reset state", st);
  host = given;
  const auto again = Clock::now();
  if (int rc = run_step(0, prompt, 0)) return rc;
  const double again_ms = std::chrono::duration<double, std::milli>(Clock::now() - again).count();
  // Same inputs, same empty cache: the same first token, or the reset left state behind.
  std::vector<int64_t> best_again;
  if (int rc = last_argmax(&best_again)) return rc;
  for (int64_t b = 0; b < batch && tokens > 0; ++b)
    if (best_again[b] != generated[static_cast<size_t>(b)][0])
      return error("the prefill run again after a state reset gave first token " + std::to_string(best_again[b]) +
                   ", the first run " + std::to_string(generated[static_cast<size_t>(b)][0]), kExitRun);
  for (int64_t b = 0; b < batch; ++b) {
    std::cout << (batch == 1 ? std::string("tokens:") : "tokens[" + std::to_string(b) + "]:");
    for (int64_t t : generated[static_cast<size_t>(b)]) std::cout << " " << t;
    std::cout << "\n";
  }
  // tokens/s over the one-token steps (the prefill's time is the first-token latency).
  const double decode_s = total_s - first_ms / 1e3;
  const double rate = tokens > 1 && decode_s > 0 ? (tokens - 1) / decode_s : 0;
  std::printf("decode: %d tokens, %.1f tokens/s, first token %.3f ms\n", tokens, rate, first_ms);
  std::printf("prefill again: %.3f ms (the same prompt, cache reset, same session)\n", again_ms);
  return 0;
}

}  // namespace cuvil::tools
