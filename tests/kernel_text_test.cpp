// TfIdfVectorizer kernel (runtime/cpu/ops/text.cpp) through the heap harness: the modes and
// weights the ONNX backend cases leave out (they are all TF), int64 and batched input, empty
// input, and malformed attributes and inputs (suite BadKernelInput), each of which must return a
// status naming the problem, never crash or read outside the pool.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>

#include "kernel_harness.h"

using namespace cuvil;

namespace {

TensorData tensor_i32(std::vector<int64_t> dims, std::vector<int32_t> v) {
  TensorData t;
  t.dtype = DType::Int32;
  t.dims = dims;
  t.bytes.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}
TensorData tensor_i64(std::vector<int64_t> dims, std::vector<int64_t> v) {
  TensorData t;
  t.dtype = DType::Int64;
  t.dims = dims;
  t.bytes.resize(v.size() * 8);
  if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_str(std::string v) { Attribute a; a.kind = Attribute::Kind::String; a.s = v; return a; }
Attribute attr_ints(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Kind::Ints; a.ints = v; return a; }
Attribute attr_floats(std::vector<float> v) { Attribute a; a.kind = Attribute::Kind::Floats; a.floats = v; return a; }
Attribute attr_strs(std::vector<std::string> v) { Attribute a; a.kind = Attribute::Kind::Strings; a.strings = v; return a; }

// The pool of the ONNX backend cases: unigrams 2,3,5,4 and bigrams (5,6),(7,8),(6,7).
std::map<std::string, Attribute> base_attrs(const std::string& mode = "TF") {
  return {{"mode", attr_str(mode)},
          {"min_gram_length", attr_int(1)},
          {"max_gram_length", attr_int(2)},
          {"max_skip_count", attr_int(0)},
          {"ngram_counts", attr_ints({0, 4})},
          {"ngram_indexes", attr_ints({0, 1, 2, 3, 4, 5, 6})},
          {"pool_int64s", attr_ints({2, 3, 5, 4, 5, 6, 7, 8, 6, 7})}};
}

struct TfIdfRun {
  Node node;
  rt::TensorView view;
  std::unique_ptr<cuvil::testing::HeapOpContext> ctx;
  rt::Status st;
  TfIdfRun(const TensorData& x, std::map<std::string, Attribute> attrs) {
    node.op_type = "TfIdfVectorizer";
    node.opset = 9;
    node.name = "tfidf";
    node.attrs = std::move(attrs);
    node.outputs.push_back(0);
    view = cuvil::testing::view_of(x);
    ctx = std::make_unique<cuvil::testing::HeapOpContext>(node, std::vector<const rt::TensorView*>{&view}, 1);
    rt::OpKernelFn fn = rt::find_op_kernel("", "TfIdfVectorizer");
    st = fn ? fn(*ctx) : rt::Status(rt::StatusCode::kUnsupported, "no kernel");
  }
  std::vector<int64_t> dims() const { return ctx->output(0).dims; }
  std::vector<float> values() const {
    const rt::TensorView& o = ctx->output(0);
    std::vector<float> v(static_cast<size_t>(o.numel()));
    if (!v.empty()) std::memcpy(v.data(), o.data, v.size() * 4);
    return v;
  }
};

#define EXPECT_TFIDF_ERROR(run, status_code, substr)                                \
  do {                                                                              \
    EXPECT_EQ((run).st.code(), rt::StatusCode::status_code) << (run).st.message();  \
    EXPECT_NE((run).st.message().find(substr), std::string::npos) << (run).st.message(); \
  } while (0)

// The row of test_tfidfvectorizer_tf_uniandbigrams_skip5: TF counts are [0, 3, 1, 0, 1, 3, 1].
const std::vector<int32_t> kRow = {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8};

TEST(TfIdfVectorizerKernel, ModesAndWeights) {
  TensorData x = tensor_i32({12}, kRow);
  auto attrs = base_attrs("TF");
  attrs["max_skip_count"] = attr_int(5);
  TfIdfRun tf(x, attrs);
  ASSERT_TRUE(tf.st.is_ok()) << tf.st.message();
  EXPECT_EQ(tf.dims(), (std::vector<int64_t>{7}));
  EXPECT_EQ(tf.values(), (std::vector<float>{0, 3, 1, 0, 1, 3, 1}));

  attrs["mode"] = attr_str("IDF");
  TfIdfRun idf(x, attrs);
  ASSERT_TRUE(idf.st.is_ok()) << idf.st.message();
  EXPECT_EQ(idf.values(), (std::vector<float>{0, 1, 1, 0, 1, 1, 1}));

  attrs["weights"] = attr_floats({0.5f, 2, 3, 4, 5, 6, 7});
  TfIdfRun idf_w(x, attrs);
  ASSERT_TRUE(idf_w.st.is_ok()) << idf_w.st.message();
  EXPECT_EQ(idf_w.values(), (std::vector<float>{0, 2, 3, 0, 5, 6, 7}));

  attrs["mode"] = attr_str("TFIDF");
  TfIdfRun tfidf(x, attrs);
  ASSERT_TRUE(tfidf.st.is_ok()) << tfidf.st.message();
  EXPECT_EQ(tfidf.values(), (std::vector<float>{0, 6, 3, 0, 5, 18, 7}));
}

TEST(TfIdfVectorizerKernel, Int64BatchAndPermutedColumns) {
  // Two rows of int64 ids; columns permuted and bigrams only (min_gram_length 2).
  TensorData x = tensor_i64({2, 6}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8});
  auto attrs = base_attrs("TF");
  attrs["min_gram_length"] = attr_int(2);
  attrs["ngram_indexes"] = attr_ints({6, 5, 4, 3, 2, 1, 0});
  TfIdfRun r(x, attrs);
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  EXPECT_EQ(r.dims(), (std::vector<int64_t>{2, 7}));
  // Row 0 holds no pool bigram; row 1 holds (6,7) (n-gram 6, column 0) and (5,6) (n-gram 4,
  // column 2). Unigrams are below min_gram_length and not counted.
  EXPECT_EQ(r.values(), (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}));
}

TEST(TfIdfVectorizerKernel, SharedColumnsAddUp) {
  // Two unigrams counted in the same column.
  TensorData x = tensor_i32({5}, {2, 3, 3, 9, 2});
  auto attrs = base_attrs("TF");
  attrs["ngram_indexes"] = attr_ints({1, 1, 0, 0, 2, 2, 2});
  TfIdfRun r(x, attrs);
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  EXPECT_EQ(r.values(), (std::vector<float>{0, 4, 0}));
}

TEST(TfIdfVectorizerKernel, EmptyInputGivesZeros) {
  TensorData rows0 = tensor_i32({0, 4}, {});
  TfIdfRun r(rows0, base_attrs());
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  EXPECT_EQ(r.dims(), (std::vector<int64_t>{0, 7}));
  TensorData cols0 = tensor_i32({2, 0}, {});
  TfIdfRun r2(cols0, base_attrs());
  ASSERT_TRUE(r2.st.is_ok()) << r2.st.message();
  EXPECT_EQ(r2.values(), std::vector<float>(14, 0.0f));
}

TEST(TfIdfVectorizerKernel, HugeSkipCountIsBounded) {
  // max_skip_count far beyond the row: distances are capped at the row length, so this ends.
  TensorData x = tensor_i32({12}, kRow);
  auto attrs = base_attrs("TF");
  attrs["max_skip_count"] = attr_int(std::numeric_limits<int64_t>::max());
  TfIdfRun r(x, attrs);
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  EXPECT_EQ(r.values(), (std::vector<float>{0, 3, 1, 0, 1, 3, 1}));
}

TEST(BadKernelInput, TfIdfUnsupportedStrings) {
  TensorData x = tensor_i32({3}, {1, 2, 3});
  auto attrs = base_attrs();
  attrs.erase("pool_int64s");
  attrs["pool_strings"] = attr_strs({"a", "b", "c", "d", "a", "b", "c", "d", "b", "c"});
  TfIdfRun r(x, attrs);
  EXPECT_TFIDF_ERROR(r, kUnsupported, "pool_strings");
  TensorData s;
  s.dtype = DType::String;
  s.dims = {2};
  s.strings = {"a", "b"};
  TfIdfRun r2(s, base_attrs());
  EXPECT_TFIDF_ERROR(r2, kUnsupported, "string input");
}

TEST(BadKernelInput, TfIdfBadInputs) {
  TensorData f;
  f.dtype = DType::Float;
  f.dims = {2};
  f.bytes.assign(8, 0);
  TfIdfRun r(f, base_attrs());
  EXPECT_TFIDF_ERROR(r, kInvalidArgument, "expected int32 or int64");
  TensorData rank3 = tensor_i32({1, 1, 2}, {2, 3});
  TfIdfRun r2(rank3, base_attrs());
  EXPECT_TFIDF_ERROR(r2, kInvalidArgument, "rank 1");
  TensorData scalar = tensor_i32({}, {2});
  TfIdfRun r3(scalar, base_attrs());
  EXPECT_TFIDF_ERROR(r3, kInvalidArgument, "rank 1");
}

TEST(BadKernelInput, TfIdfBadModeAndLengths) {
  TensorData x = tensor_i32({3}, {2, 3, 5});
  auto missing = base_attrs();
  missing.erase("mode");
  TfIdfRun r0(x, missing);
  EXPECT_TFIDF_ERROR(r0, kInvalidArgument, "missing required attribute 'mode'");
  auto a = base_attrs();
  a["mode"] = attr_str("BM25");
  TfIdfRun r1(x, a);
  EXPECT_TFIDF_ERROR(r1, kInvalidArgument, "'mode' is 'BM25'");
  a = base_attrs();
  a["min_gram_length"] = attr_int(0);
  TfIdfRun r2(x, a);
  EXPECT_TFIDF_ERROR(r2, kInvalidArgument, "'min_gram_length' is 0");
  a["min_gram_length"] = attr_int(-3);
  TfIdfRun r3(x, a);
  EXPECT_TFIDF_ERROR(r3, kInvalidArgument, "'min_gram_length' is -3");
  a = base_attrs();
  a["min_gram_length"] = attr_int(2);
  a["max_gram_length"] = attr_int(1);
  TfIdfRun r4(x, a);
  EXPECT_TFIDF_ERROR(r4, kInvalidArgument, "less than min_gram_length");
  a = base_attrs();
  a["max_skip_count"] = attr_int(-1);
  TfIdfRun r5(x, a);
  EXPECT_TFIDF_ERROR(r5, kInvalidArgument, "'max_skip_count' is -1");
  a = base_attrs();
  a["max_gram_length"] = attr_int(3);
  TfIdfRun r6(x, a);
  EXPECT_TFIDF_ERROR(r6, kInvalidArgument, "up to length 2");
}

TEST(BadKernelInput, TfIdfInconsistentPool) {
  TensorData x = tensor_i32({3}, {2, 3, 5});
  auto a = base_attrs();
  a["ngram_counts"] = attr_ints({0, 11});  // past the 10-item pool
  TfIdfRun r1(x, a);
  EXPECT_TFIDF_ERROR(r1, kInvalidArgument, "outside the pool");
  a["ngram_counts"] = attr_ints({0, -2});
  TfIdfRun r2(x, a);
  EXPECT_TFIDF_ERROR(r2, kInvalidArgument, "'ngram_counts'");
  a["ngram_counts"] = attr_ints({0, 5});  // 5 items of bigrams: not whole
  TfIdfRun r3(x, a);
  EXPECT_TFIDF_ERROR(r3, kInvalidArgument, "not a whole number of 2-grams");
  a["ngram_counts"] = attr_ints({2, 4});
  TfIdfRun r4(x, a);
  EXPECT_TFIDF_ERROR(r4, kInvalidArgument, "must start at pool index 0");
  a["ngram_counts"] = attr_ints({});
  TfIdfRun r5(x, a);
  EXPECT_TFIDF_ERROR(r5, kInvalidArgument, "'ngram_counts' is empty");
  a = base_attrs();
  a["pool_int64s"] = attr_ints({2, 3, 5, 2, 5, 6, 7, 8, 6, 7});  // unigram 2 twice
  TfIdfRun r6(x, a);
  EXPECT_TFIDF_ERROR(r6, kInvalidArgument, "duplicates");
  a = base_attrs();
  a.erase("pool_int64s");
  TfIdfRun r7(x, a);
  EXPECT_TFIDF_ERROR(r7, kInvalidArgument, "'pool_int64s' is missing");
}

TEST(BadKernelInput, TfIdfBadIndexesAndWeights) {
  TensorData x = tensor_i32({3}, {2, 3, 5});
  auto a = base_attrs();
  a["ngram_indexes"] = attr_ints({0, 1, 2, -1, 4, 5, 6});
  TfIdfRun r1(x, a);
  EXPECT_TFIDF_ERROR(r1, kInvalidArgument, "entry 3 is negative");
  a["ngram_indexes"] = attr_ints({0, 1, 2, 3, 4, 5});  // 7 n-grams in the pool
  TfIdfRun r2(x, a);
  EXPECT_TFIDF_ERROR(r2, kInvalidArgument, "the pool holds 7 n-grams");
  a["ngram_indexes"] = attr_ints({0, 1, 2, 3, 4, 5, std::numeric_limits<int64_t>::max()});
  TfIdfRun r3(x, a);
  EXPECT_TFIDF_ERROR(r3, kOutOfMemory, "limit");
  a = base_attrs();
  a["weights"] = attr_floats({1, 2, 3});
  TfIdfRun r4(x, a);
  EXPECT_TFIDF_ERROR(r4, kInvalidArgument, "'weights' has 3 entries");
  a["ngram_indexes"] = attr_ints({0, 1, 2, 3, 4, 5, 9});  // 10 columns, 7 weights
  a["weights"] = attr_floats({1, 2, 3, 4, 5, 6, 7});
  TfIdfRun r5(x, a);
  EXPECT_TFIDF_ERROR(r5, kInvalidArgument, "fewer than the 10 output columns");
}

}  // namespace
