// Text-feature kernels: TfIdfVectorizer (opset 9) over int32/int64 token ids. String tokens
// (input or pool_strings) are not supported: cuvil does not compile string tensors, so both give
// a kUnsupported error. Semantics follow ONNX Runtime's CPU kernel, which the ONNX reference
// implementation copies: n-gram k of the pool (numbered across all lengths, in pool order) is
// counted in output column ngram_indexes[k]; n-grams are matched with skip distances
// 1..max_skip_count+1, unigrams once; `weights` is indexed by output column. Every attribute is
// validated before anything is allocated, so a malformed node gives an error naming the
// attribute, never an out-of-range access.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

enum class TfIdfMode { kTF, kIDF, kTFIDF };

// The pool as a trie over token ids: a node per distinct pool n-gram prefix. `slot` of a node
// is the dense slot of the pool n-gram ending there (-1 for a bare prefix); slots collapse pool
// n-grams that share an output column, so per-row counts need only one entry per column used.
struct NgramTrie {
  struct Key {
    int32_t parent;
    int64_t token;
    bool operator==(const Key& o) const { return parent == o.parent && token == o.token; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = static_cast<uint64_t>(k.token) * 0x9e3779b97f4a7c15ull;
      return static_cast<size_t>(h ^ (static_cast<uint64_t>(k.parent) + (h >> 29)));
    }
  };
  std::unordered_map<Key, int32_t, KeyHash> children;
  std::vector<int32_t> slot{-1};  // node 0 is the root (the empty n-gram)

  int32_t child(int32_t node, int64_t token) const {
    auto it = children.find(Key{node, token});
    return it == children.end() ? -1 : it->second;
  }
  int32_t add_child(int32_t node, int64_t token) {
    auto [it, inserted] = children.emplace(Key{node, token}, static_cast<int32_t>(slot.size()));
    if (inserted) slot.push_back(-1);
    return it->second;
  }
};

struct TfIdfPlan {
  TfIdfMode mode = TfIdfMode::kTF;
  int64_t min_gram = 0, max_gram = 0, max_skip = 0;
  int64_t width = 0;                  // output columns: max(ngram_indexes) + 1
  std::vector<float> weights;         // empty, or one per output column (and more)
  NgramTrie trie;
  std::vector<int64_t> slot_column;   // output column of each slot
};

// Reads and validates the attributes and builds the pool trie.
Status build_tfidf_plan(OpContext& ctx, TfIdfPlan* plan) {
  const AttrReader& a = ctx.attrs();
  for (const char* key : {"mode", "min_gram_length", "max_gram_length", "max_skip_count",
                          "ngram_counts", "ngram_indexes"})
    if (!a.has(key)) return ctx.error(StatusCode::kInvalidArgument, "missing required attribute '", key, "'");
  if (a.has("pool_strings"))
    return ctx.error(StatusCode::kUnsupported, "attribute 'pool_strings' is not supported (string tensors are "
                     "not compiled); use pool_int64s with integer token ids");
  const std::string mode = a.get_string("mode", "");
  if (mode == "TF") plan->mode = TfIdfMode::kTF;
  else if (mode == "IDF") plan->mode = TfIdfMode::kIDF;
  else if (mode == "TFIDF") plan->mode = TfIdfMode::kTFIDF;
  else return ctx.error(StatusCode::kInvalidArgument, "attribute 'mode' is '", mode, "', expected TF, IDF or TFIDF");

  plan->min_gram = a.get_int("min_gram_length", 0);
  plan->max_gram = a.get_int("max_gram_length", 0);
  plan->max_skip = a.get_int("max_skip_count", -1);
  if (plan->min_gram < 1)
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'min_gram_length' is ", plan->min_gram, ", must be >= 1");
  if (plan->max_gram < plan->min_gram)
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'max_gram_length' is ", plan->max_gram,
                     ", less than min_gram_length ", plan->min_gram);
  if (plan->max_skip < 0)
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'max_skip_count' is ", plan->max_skip, ", must be >= 0");

  const std::vector<int64_t> counts = a.get_ints("ngram_counts");
  const std::vector<int64_t> indexes = a.get_ints("ngram_indexes");
  const std::vector<int64_t> pool = a.get_ints("pool_int64s");
  if (counts.empty()) return ctx.error(StatusCode::kInvalidArgument, "attribute 'ngram_counts' is empty");
  if (indexes.empty()) return ctx.error(StatusCode::kInvalidArgument, "attribute 'ngram_indexes' is empty");
  if (pool.empty())
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'pool_int64s' is missing or empty");
  if (pool.size() >= static_cast<size_t>(INT32_MAX))  // trie nodes are numbered in int32
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'pool_int64s' has ", pool.size(),
                     " items, more than supported");
  const int64_t lengths = static_cast<int64_t>(counts.size());  // ngram_counts[n-1] starts the n-grams
  if (plan->max_gram > lengths)
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'max_gram_length' is ", plan->max_gram,
                     ", but ngram_counts describes n-grams up to length ", lengths);

  // Pool layout: counts[n-1] is where the n-grams start; they run to the next entry (or the pool
  // end) and must fill whole n-grams.
  const int64_t pool_size = static_cast<int64_t>(pool.size());
  if (counts[0] != 0)
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'ngram_counts' entry 0 is ", counts[0],
                     ", the 1-grams must start at pool index 0");
  int64_t total_ngrams = 0;
  for (int64_t n = 1; n <= lengths; ++n) {
    const int64_t begin = counts[n - 1];
    const int64_t end = n < lengths ? counts[n] : pool_size;
    if (begin < 0 || begin > pool_size || end < begin || end > pool_size)
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'ngram_counts' entry ", n - 1, " (", begin,
                       ") gives ", n, "-grams outside the pool of ", pool_size, " items or out of order");
    if ((end - begin) % n != 0)
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'ngram_counts': the ", end - begin,
                       " pool items of the ", n, "-grams are not a whole number of ", n, "-grams");
    total_ngrams += (end - begin) / n;
  }
  if (static_cast<int64_t>(indexes.size()) != total_ngrams)
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'ngram_indexes' has ", indexes.size(),
                     " entries, but the pool holds ", total_ngrams, " n-grams");
  int64_t max_index = 0;
  for (size_t i = 0; i < indexes.size(); ++i) {
    if (indexes[i] < 0)
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'ngram_indexes' entry ", i, " is negative (",
                       indexes[i], ")");
    max_index = std::max(max_index, indexes[i]);
  }
  if (static_cast<uint64_t>(max_index) >= kMaxOutputBytes / sizeof(float))
    return ctx.error(StatusCode::kOutOfMemory, "attribute 'ngram_indexes' entry ", max_index,
                     " makes an output row larger than the ", kMaxOutputBytes, "-byte limit");
  plan->width = max_index + 1;

  plan->weights = a.get_floats("weights");
  if (a.has("weights")) {
    if (plan->weights.size() != indexes.size())
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'weights' has ", plan->weights.size(),
                       " entries, but ngram_indexes has ", indexes.size());
    if (static_cast<int64_t>(plan->weights.size()) < plan->width)
      return ctx.error(StatusCode::kInvalidArgument, "attribute 'weights' has ", plan->weights.size(),
                       " entries, fewer than the ", plan->width, " output columns it is indexed by");
  }

  // Only the lengths in [min_gram, max_gram] are matched; the others keep their numbers.
  std::unordered_map<int64_t, int32_t> column_slot;
  int64_t ngram_id = 0;
  for (int64_t n = 1; n <= lengths; ++n) {
    const int64_t begin = counts[n - 1];
    const int64_t end = n < lengths ? counts[n] : pool_size;
    for (int64_t at = begin; at < end; at += n, ++ngram_id) {
      if (n < plan->min_gram || n > plan->max_gram) continue;
      int32_t node = 0;
      for (int64_t j = 0; j < n; ++j) node = plan->trie.add_child(node, pool[at + j]);
      if (plan->trie.slot[node] >= 0)
        return ctx.error(StatusCode::kInvalidArgument, "attribute 'pool_int64s': ", n, "-gram ", ngram_id,
                         " (at pool index ", at, ") duplicates an earlier ", n, "-gram");
      const int64_t column = indexes[ngram_id];
      auto [it, inserted] = column_slot.emplace(column, static_cast<int32_t>(plan->slot_column.size()));
      if (inserted) plan->slot_column.push_back(column);
      plan->trie.slot[node] = it->second;
    }
  }
  return Status::ok();
}

// Counts the pool n-grams of one row into counts (one entry per slot, zeroed by the caller).
template <typename T>
void count_row(const TfIdfPlan& plan, const T* x, int64_t len, std::vector<int64_t>& counts) {
  const NgramTrie& trie = plan.trie;
  int64_t start_size = plan.min_gram;
  if (start_size == 1) {  // unigrams are counted once, not once per skip distance
    for (int64_t i = 0; i < len; ++i) {
      const int32_t node = trie.child(0, static_cast<int64_t>(x[i]));
      if (node >= 0 && trie.slot[node] >= 0) ++counts[trie.slot[node]];
    }
    start_size = 2;
    if (start_size > plan.max_gram) return;
  }
  if (len < 2) return;
  // Distances above len - 1 cannot hold two tokens; the cap bounds the work for huge
  // max_skip_count values.
  const int64_t max_distance = plan.max_skip >= len - 1 ? len - 1 : plan.max_skip + 1;
  for (int64_t d = 1; d <= max_distance; ++d) {
    for (int64_t s = 0; s < len; ++s) {
      if (start_size - 1 > (len - 1 - s) / d) break;  // no n-gram of start_size fits from here on
      int32_t node = 0;
      for (int64_t size = 1, i = s; size <= plan.max_gram && i < len; ++size, i += d) {
        node = trie.child(node, static_cast<int64_t>(x[i]));
        if (node < 0) break;
        if (size >= start_size && trie.slot[node] >= 0) ++counts[trie.slot[node]];
      }
    }
  }
}

}  // namespace

Status kernel_TfIdfVectorizer(OpContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.input(0))
    return ctx.error(StatusCode::kInvalidArgument, "missing input 0 (X)");
  const TensorView& x = *ctx.input(0);
  if (x.dtype == DType::String)
    return ctx.error(StatusCode::kUnsupported, "string input X is not supported (string tensors are not "
                     "compiled); map tokens to int32/int64 ids first");
  if (x.dtype != DType::Int32 && x.dtype != DType::Int64)
    return ctx.error(StatusCode::kInvalidArgument, "input X has dtype ", dtype_name(x.dtype),
                     ", expected int32 or int64");
  if (x.dims.size() != 1 && x.dims.size() != 2)
    return ctx.error(StatusCode::kInvalidArgument, "input X has shape ", dims_string(x.dims),
                     ", expected rank 1 [C] or rank 2 [N, C]");
  int64_t numel = 0;
  if (!dims_numel(x.dims, &numel))
    return ctx.error(StatusCode::kInvalidArgument, "input X has invalid shape ", dims_string(x.dims));

  TfIdfPlan plan;
  CUVIL_RETURN_IF_ERROR(build_tfidf_plan(ctx, &plan));

  const int64_t rows = x.dims.size() == 2 ? x.dims[0] : 1;
  const int64_t len = x.dims.back();
  std::vector<int64_t> out_dims = x.dims.size() == 2 ? std::vector<int64_t>{rows, plan.width}
                                                      : std::vector<int64_t>{plan.width};
  auto out_numel = checked_mul(rows, plan.width);
  if (!out_numel || static_cast<uint64_t>(*out_numel) > kMaxOutputBytes / sizeof(float))
    return ctx.error(StatusCode::kOutOfMemory, "output ", dims_string(out_dims), " is larger than the ",
                     kMaxOutputBytes, "-byte limit");
  TensorView* out = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, out_dims, &out));
  float* y = out->as<float>();
  if (*out_numel > 0) std::fill(y, y + *out_numel, 0.0f);
  if (numel == 0) return Status::ok();

  const size_t slots = plan.slot_column.size();
  auto run_rows = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = x.as<T>();
    parallel_range(ctx, rows, 1, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> counts(slots);
      for (int64_t r = begin; r < end; ++r) {
        std::fill(counts.begin(), counts.end(), 0);
        count_row(plan, data + r * len, len, counts);
        float* row = y + r * plan.width;
        for (size_t s = 0; s < slots; ++s) {
          if (counts[s] == 0) continue;
          const int64_t col = plan.slot_column[s];
          const float w = plan.weights.empty() ? 1.0f : plan.weights[static_cast<size_t>(col)];
          switch (plan.mode) {
            case TfIdfMode::kTF: row[col] = static_cast<float>(counts[s]); break;
            case TfIdfMode::kIDF: row[col] = w; break;
            case TfIdfMode::kTFIDF: row[col] = static_cast<float>(counts[s]) * w; break;
          }
        }
      }
    });
  };
  if (x.dtype == DType::Int32) run_rows(TypeTag<int32_t>{});
  else run_rows(TypeTag<int64_t>{});
  return Status::ok();
}

}  // namespace cuvil::rt::ops
