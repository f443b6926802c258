// Bad-input tests for the tensor/movement kernels (RELIABILITY.md class 7): out-of-range
// data-dependent indices, oversized outputs, bad shapes, odd dtypes. Kernels run through the
// heap harness; every case must return a status naming the problem, never crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_harness.h"

using namespace cuvil;

namespace {

struct T {
  TensorData d;
  template <typename E>
  static T make(DType t, std::vector<int64_t> dims, std::vector<E> v) {
    T x;
    x.d.dtype = t;
    x.d.dims = dims;
    x.d.bytes.resize(v.size() * sizeof(E));
    if (!v.empty()) std::memcpy(x.d.bytes.data(), v.data(), x.d.bytes.size());
    return x;
  }
};
T f32(std::vector<int64_t> dims, std::vector<float> v) { return T::make(DType::Float, dims, v); }
T i64(std::vector<int64_t> dims, std::vector<int64_t> v) { return T::make(DType::Int64, dims, v); }
T i32(std::vector<int64_t> dims, std::vector<int32_t> v) { return T::make(DType::Int32, dims, v); }

Attribute ai(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute af(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }
Attribute as(std::string v) { Attribute a; a.kind = Attribute::Kind::String; a.s = v; return a; }
Attribute afs(std::vector<float> v) { Attribute a; a.kind = Attribute::Kind::Floats; a.floats = v; return a; }
Attribute ais(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Kind::Ints; a.ints = v; return a; }

struct KRun {
  Node node;
  std::vector<rt::TensorView> views;
  std::unique_ptr<cuvil::testing::HeapOpContext> ctx;
  rt::Status st;
  KRun(const std::string& op, int opset, std::vector<const T*> ins, size_t nout,
      std::map<std::string, Attribute> attrs = {}) {
    node.op_type = op;
    node.opset = opset;
    node.name = "n";
    node.attrs = attrs;
    for (size_t i = 0; i < nout; ++i) node.outputs.push_back(static_cast<ValueId>(i));
    views.reserve(ins.size());
    std::vector<const rt::TensorView*> ptrs;
    for (const T* t : ins) {
      if (!t) { ptrs.push_back(nullptr); continue; }
      views.push_back(cuvil::testing::view_of(t->d));
      ptrs.push_back(&views.back());
    }
    ctx = std::make_unique<cuvil::testing::HeapOpContext>(node, ptrs, nout);
    rt::OpKernelFn fn = rt::find_op_kernel("", op);
    if (!fn) { st = rt::Status(rt::StatusCode::kUnsupported, "no kernel"); return; }
    st = fn(*ctx);
  }
  const rt::TensorView& out(size_t i = 0) const { return ctx->output(i); }
  template <typename E> std::vector<E> vals(size_t i = 0) const {
    const auto& o = out(i);
    std::vector<E> v(o.bytes() / sizeof(E));
    if (!v.empty()) std::memcpy(v.data(), o.data, v.size() * sizeof(E));
    return v;
  }
};

#define EXPECT_ERR(r, kc, substr)                                           \
  do {                                                                        \
    EXPECT_EQ((r).st.code(), rt::StatusCode::kc) << (r).st.message();       \
    EXPECT_NE((r).st.message().find(substr), std::string::npos) << (r).st.message(); \
  } while (0)

TEST(BadKernelInput, GatherOutOfRange) {
  T data = f32({3}, {1, 2, 3});
  T ind = i64({2}, {0, 5});
  KRun r("Gather", 13, {&data, &ind}, 1);
  EXPECT_ERR(r, kRuntime, "index 5 out of range [-3, 2] at position [1]");
  T ind2 = i64({2}, {-3, -1});
  KRun r2("Gather", 13, {&data, &ind2}, 1);
  ASSERT_TRUE(r2.st.is_ok()) << r2.st.message();
  EXPECT_EQ(r2.vals<float>(), (std::vector<float>{1, 3}));
  T ind3 = i32({1}, {-4});
  KRun r3("Gather", 13, {&data, &ind3}, 1);
  EXPECT_ERR(r3, kRuntime, "index -4 out of range");
}

TEST(BadKernelInput, GatherElementsAndND) {
  T data = f32({2, 2}, {1, 2, 3, 4});
  T ind = i64({2, 2}, {0, 1, 2, 0});
  KRun r("GatherElements", 13, {&data, &ind}, 1, {{"axis", ai(0)}});
  EXPECT_ERR(r, kRuntime, "index 2 out of range [-2, 1] at position [1,0]");
  T big = i64({3, 2}, {0, 0, 0, 0, 0, 0});
  KRun r2("GatherElements", 13, {&data, &big}, 1, {{"axis", ai(1)}});
  EXPECT_ERR(r2, kShape, "exceed");
  T nd = i64({1, 2}, {1, -3});
  KRun r3("GatherND", 13, {&data, &nd}, 1);
  EXPECT_ERR(r3, kRuntime, "index -3 out of range [-2, 1] at position [0,1]");
  // batch_dims = 1: data [2,3,2], indices [2,1,1] -> out [2,1,2]
  T d3 = f32({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  T i3 = i64({2, 1, 1}, {2, -3});
  KRun r4("GatherND", 13, {&d3, &i3}, 1, {{"batch_dims", ai(1)}});
  ASSERT_TRUE(r4.st.is_ok()) << r4.st.message();
  EXPECT_EQ(r4.out().dims, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(r4.vals<float>(), (std::vector<float>{4, 5, 6, 7}));
  T bad = i64({2, 1, 3}, {0, 0, 0, 0, 0, 0});
  KRun r5("GatherND", 13, {&d3, &bad}, 1, {{"batch_dims", ai(1)}});
  EXPECT_ERR(r5, kShape, "coordinates");
}

TEST(BadKernelInput, Scatters) {
  T data = f32({2, 2}, {1, 2, 3, 4});
  T ind = i64({1, 2}, {0, 7});
  T upd = f32({1, 2}, {9, 9});
  KRun r("ScatterElements", 16, {&data, &ind, &upd}, 1, {{"axis", ai(1)}});
  EXPECT_ERR(r, kRuntime, "index 7 out of range [-2, 1] at position [0,1]");
  T nd = i64({1, 1}, {-5});
  T updnd = f32({1, 2}, {9, 9});
  KRun r2("ScatterND", 16, {&data, &nd, &updnd}, 1);
  EXPECT_ERR(r2, kRuntime, "index -5 out of range");
  T updbad = f32({1, 3}, {9, 9, 9});
  T nd2 = i64({1, 1}, {1});
  KRun r3("ScatterND", 16, {&data, &nd2, &updbad}, 1);
  EXPECT_ERR(r3, kShape, "updates have dims");
  // int reductions
  T di = i32({4}, {1, 2, 3, 4});
  T ii = i64({3}, {0, 0, -1});
  T ui = i32({3}, {5, 6, 7});
  KRun r4("ScatterElements", 18, {&di, &ii, &ui}, 1, {{"reduction", as("mul")}});
  ASSERT_TRUE(r4.st.is_ok()) << r4.st.message();
  EXPECT_EQ(r4.vals<int32_t>(), (std::vector<int32_t>{30, 2, 3, 28}));
  KRun r5("ScatterElements", 18, {&di, &ii, &ui}, 1, {{"reduction", as("max")}});
  EXPECT_EQ(r5.vals<int32_t>(), (std::vector<int32_t>{6, 2, 3, 7}));
  KRun r6("ScatterElements", 18, {&di, &ii, &ui}, 1, {{"reduction", as("bogus")}});
  EXPECT_ERR(r6, kInvalidArgument, "reduction");
}

TEST(BadKernelInput, HugeOutputs) {
  T shape = i64({3}, {1 << 20, 1 << 20, 1 << 20});
  KRun r("ConstantOfShape", 9, {&shape}, 1);
  EXPECT_ERR(r, kOutOfMemory, "limit");
  T shape2 = i64({2}, {int64_t{1} << 40, int64_t{1} << 40});
  KRun r1("ConstantOfShape", 9, {&shape2}, 1);
  EXPECT_ERR(r1, kShape, "invalid dims");  // overflows int64
  T neg = i64({2}, {-1, 2});
  KRun r1b("ConstantOfShape", 9, {&neg}, 1);
  EXPECT_ERR(r1b, kShape, "negative");
  T x = f32({1}, {1});
  KRun r2("Expand", 13, {&x, &shape}, 1);
  EXPECT_ERR(r2, kOutOfMemory, "limit");
  T rep = i64({1}, {int64_t{1} << 40});
  KRun r3("Tile", 13, {&x, &rep}, 1);
  EXPECT_ERR(r3, kOutOfMemory, "limit");
  T s = i64({}, {0}), l = i64({}, {int64_t{1} << 40}), d = i64({}, {1});
  KRun r4("Range", 11, {&s, &l, &d}, 1);
  EXPECT_ERR(r4, kOutOfMemory, "limit");
  T sf = f32({}, {0}), lf = f32({}, {1e30f}), dfl = f32({}, {1e-30f});
  KRun r5("Range", 11, {&sf, &lf, &dfl}, 1);
  EXPECT_EQ(r5.st.code(), rt::StatusCode::kOutOfMemory) << r5.st.message();
  T dz = i64({}, {0});
  KRun r5b("Range", 11, {&s, &l, &dz}, 1);
  EXPECT_ERR(r5b, kInvalidArgument, "delta is 0");
  T pads = i64({2}, {int64_t{1} << 40, 0});
  KRun r6("Pad", 13, {&x, &pads}, 1);
  EXPECT_EQ(r6.st.code(), rt::StatusCode::kOutOfMemory) << r6.st.message();
  T idx = i64({1}, {0}), depth = i64({}, {int64_t{1} << 40}), vals = f32({2}, {0, 1});
  KRun r7("OneHot", 11, {&idx, &depth, &vals}, 1);
  EXPECT_ERR(r7, kOutOfMemory, "limit");
  T img = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  T roi = f32({0}, {});
  T scales = f32({4}, {1, 1, 1e6f, 1e6f});
  KRun r8("Resize", 13, {&img, &roi, &scales}, 1);
  EXPECT_EQ(r8.st.code(), rt::StatusCode::kOutOfMemory) << r8.st.message();
  T scales0 = f32({4}, {1, 1, 0, 1});
  KRun r9("Resize", 13, {&img, &roi, &scales0}, 1);
  EXPECT_ERR(r9, kInvalidArgument, "positive");
}

TEST(BadKernelInput, ReshapeErrors) {
  T x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  T s1 = i64({2}, {-1, -1});
  KRun r("Reshape", 14, {&x, &s1}, 1);
  EXPECT_ERR(r, kShape, "more than one -1");
  T s2 = i64({2}, {4, 2});
  KRun r2("Reshape", 14, {&x, &s2}, 1);
  EXPECT_ERR(r2, kShape, "cannot view");
  T s3 = i64({2}, {4, -1});
  KRun r3("Reshape", 14, {&x, &s3}, 1);
  EXPECT_ERR(r3, kShape, "cannot infer");
  T s4 = i64({3}, {0, 0, 0});
  KRun r4("Reshape", 14, {&x, &s4}, 1);
  EXPECT_ERR(r4, kShape, "rank");
  T s5 = i64({2}, {-2, 3});
  KRun r5("Reshape", 14, {&x, &s5}, 1);
  EXPECT_ERR(r5, kShape, "is -2");
  T s6 = i64({2}, {int64_t{1} << 62, 8});
  KRun r6("Reshape", 14, {&x, &s6}, 1);
  EXPECT_ERR(r6, kShape, "overflows");
}

TEST(KernelOddInputs, Int4AndBool) {
  // int4 [2,3] = 0..5 packed low nibble first -> transpose -> [3,2] = 0,3,1,4,2,5
  T x = T::make<uint8_t>(DType::Int4, {2, 3}, {0x10, 0x32, 0x54});
  KRun r("Transpose", 13, {&x}, 1);
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  EXPECT_EQ(r.vals<uint8_t>(), (std::vector<uint8_t>{0x30, 0x41, 0x52}));
  T starts = i64({1}, {-1}), ends = i64({1}, {std::numeric_limits<int64_t>::min()}), axes = i64({1}, {1}),
    steps = i64({1}, {-2});
  KRun r2("Slice", 13, {&x, &starts, &ends, &axes, &steps}, 1);
  ASSERT_TRUE(r2.st.is_ok()) << r2.st.message();
  EXPECT_EQ(r2.out().dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r2.vals<uint8_t>(), (std::vector<uint8_t>{0x02, 0x35}));  // 2,0,5,3
  KRun r3("Concat", 13, {&x, &x}, 1, {{"axis", ai(0)}});
  ASSERT_TRUE(r3.st.is_ok()) << r3.st.message();
  EXPECT_EQ(r3.vals<uint8_t>(), (std::vector<uint8_t>{0x10, 0x32, 0x54, 0x10, 0x32, 0x54}));
  T shape = i64({1}, {3});
  Attribute v; v.kind = Attribute::Kind::Tensor;
  auto td = std::make_shared<TensorData>(); td->dtype = DType::Int4; td->dims = {1}; td->bytes = {0x07};
  v.t = td;
  KRun r4("ConstantOfShape", 21, {&shape}, 1, {{"value", v}});
  ASSERT_TRUE(r4.st.is_ok()) << r4.st.message();
  EXPECT_EQ(r4.vals<uint8_t>(), (std::vector<uint8_t>{0x77, 0x07}));
  T b = T::make<uint8_t>(DType::Bool, {3}, {1, 0, 1});
  T ind = i64({2}, {2, 1});
  KRun r5("Gather", 13, {&b, &ind}, 1);
  ASSERT_TRUE(r5.st.is_ok()) << r5.st.message();
  EXPECT_EQ(r5.vals<uint8_t>(), (std::vector<uint8_t>{1, 0}));
  KRun r6("NonZero", 13, {&b}, 1);
  ASSERT_TRUE(r6.st.is_ok()) << r6.st.message();
  EXPECT_EQ(r6.vals<int64_t>(), (std::vector<int64_t>{0, 2}));
  T str;
  str.d.dtype = DType::String;
  str.d.dims = {2};
  KRun r7("Transpose", 13, {&str}, 1);
  EXPECT_ERR(r7, kUnsupported, "str");
  T scal = f32({}, {3});
  KRun r8("NonZero", 13, {&scal}, 1);
  ASSERT_TRUE(r8.st.is_ok());
  EXPECT_EQ(r8.out().dims, (std::vector<int64_t>{1, 1}));
}

TEST(KernelOddInputs, TopKUniqueSplit) {
  T x = f32({5}, {1, NAN, 3, 3, -1});
  T k = i64({1}, {3});
  KRun r("TopK", 11, {&x, &k}, 2);
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  EXPECT_EQ(r.vals<int64_t>(1), (std::vector<int64_t>{1, 2, 3}));
  T k2 = i64({1}, {6});
  KRun r2("TopK", 11, {&x, &k2}, 2);
  EXPECT_ERR(r2, kRuntime, "k is 6");
  KRun r3("TopK", 1, {&x}, 2, {{"k", ai(2)}});
  ASSERT_TRUE(r3.st.is_ok()) << r3.st.message();
  EXPECT_EQ(r3.vals<int64_t>(1), (std::vector<int64_t>{1, 2}));
  KRun r4("Unique", 11, {&x}, 4);
  ASSERT_TRUE(r4.st.is_ok()) << r4.st.message();
  EXPECT_EQ(r4.vals<int64_t>(3), (std::vector<int64_t>{1, 1, 2, 1}));
  T y = f32({7}, {0, 1, 2, 3, 4, 5, 6});
  KRun r5("Split", 18, {&y}, 3, {{"num_outputs", ai(3)}});
  ASSERT_TRUE(r5.st.is_ok()) << r5.st.message();
  EXPECT_EQ(r5.vals<float>(2), (std::vector<float>{6}));
  KRun r6("Split", 13, {&y}, 3);
  EXPECT_ERR(r6, kShape, "evenly");
  T sp = i64({2}, {3, 3});
  KRun r7("Split", 13, {&y, &sp}, 2);
  EXPECT_ERR(r7, kShape, "sum to 6");
}

TEST(KernelOddInputs, PadModes) {
  T x = f32({3}, {1, 2, 3});
  T pads = i64({2}, {5, 4});
  KRun r("Pad", 13, {&x, &pads}, 1, {{"mode", as("reflect")}});
  ASSERT_TRUE(r.st.is_ok()) << r.st.message();
  // numpy.pad([1,2,3], (5,4), 'reflect') = [2,3,2,1,2,3,2,1,2,3,2,1]
  EXPECT_EQ(r.vals<float>(), (std::vector<float>{2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3}));
  KRun r2("Pad", 19, {&x, &pads}, 1, {{"mode", as("wrap")}});
  EXPECT_EQ(r2.vals<float>(), (std::vector<float>{2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1}));
  T crop = i64({2}, {-1, 2});
  KRun r3("Pad", 13, {&x, &crop}, 1, {{"mode", as("edge")}});
  EXPECT_EQ(r3.vals<float>(), (std::vector<float>{2, 3, 3, 3}));
  T cv = f32({}, {7});
  T none;
  KRun r4("Pad", 18, {&x, &crop, &cv}, 1);
  EXPECT_EQ(r4.vals<float>(), (std::vector<float>{2, 3, 7, 7}));
  T bad = i64({2}, {-2, -2});
  KRun r5("Pad", 13, {&x, &bad}, 1);
  EXPECT_ERR(r5, kShape, "negative");
  KRun r6("Pad", 2, {&x}, 1, {{"pads", ais({1, 1})}, {"value", af(-1)}});
  ASSERT_TRUE(r6.st.is_ok()) << r6.st.message();
  EXPECT_EQ(r6.vals<float>(), (std::vector<float>{-1, 1, 2, 3, -1}));
  T empty = f32({0}, {});
  T p1 = i64({2}, {1, 1});
  KRun r7("Pad", 13, {&empty, &p1}, 1, {{"mode", as("reflect")}});
  EXPECT_ERR(r7, kShape, "nothing is left");
}

TEST(KernelOddInputs, Misc) {
  T x = f32({2, 2}, {1, 2, 3, 4});
  T seq = i64({2}, {3, 1});
  KRun r("ReverseSequence", 10, {&x, &seq}, 1);
  EXPECT_ERR(r, kRuntime, "sequence length 3 out of range [0, 2] at position [0]");
  T cond = T::make<uint8_t>(DType::Bool, {5}, {1, 0, 0, 0, 1});
  KRun r2("Compress", 11, {&x, &cond}, 1, {{"axis", ai(0)}});
  EXPECT_ERR(r2, kRuntime, "index 4");
  T ind = i64({3}, {0, 3, -4});
  T depth = f32({}, {3.5f});
  T vals = i32({2}, {0, 1});
  KRun r3("OneHot", 11, {&ind, &depth, &vals}, 1);
  ASSERT_TRUE(r3.st.is_ok()) << r3.st.message();
  EXPECT_EQ(r3.vals<int32_t>(), (std::vector<int32_t>{1, 0, 0, 0, 0, 0, 0, 0, 0}));
  KRun r4("Transpose", 13, {&x}, 1, {{"perm", ais({0, 0})}});
  EXPECT_ERR(r4, kInvalidArgument, "permutation");
  T sh = i64({1}, {3});
  KRun r5("Expand", 13, {&x, &sh}, 1);
  EXPECT_ERR(r5, kShape, "broadcast");
  T scal = f32({}, {5});
  T sh2 = i64({2}, {2, 3});
  KRun r6("Expand", 13, {&scal, &sh2}, 1);
  ASSERT_TRUE(r6.st.is_ok());
  EXPECT_EQ(r6.vals<float>(), (std::vector<float>(6, 5)));
  T rep = i64({0}, {});
  KRun r7("Tile", 13, {&scal, &rep}, 1);
  ASSERT_TRUE(r7.st.is_ok()) << r7.st.message();
  EXPECT_EQ(r7.vals<float>(), (std::vector<float>{5}));
  KRun r8("Squeeze", 13, {&x, &sh}, 1);
  EXPECT_ERR(r8, kInvalidArgument, "out of range");
  T ax0 = i64({1}, {0});
  KRun r9("Squeeze", 13, {&x, &ax0}, 1);
  EXPECT_ERR(r9, kShape, "size 2");
  KRun r10("Unsqueeze", 13, {&x, &ax0}, 1);
  ASSERT_TRUE(r10.st.is_ok());
  EXPECT_EQ(r10.out().dims, (std::vector<int64_t>{1, 2, 2}));
  KRun r11("Unsqueeze", 11, {&x}, 1, {{"axes", ais({0, -1})}});
  ASSERT_TRUE(r11.st.is_ok()) << r11.st.message();
  EXPECT_EQ(r11.out().dims, (std::vector<int64_t>{1, 2, 2, 1}));
  KRun r12("Slice", 9, {&x}, 1, {{"starts", ais({1})}, {"ends", ais({1000})}, {"axes", ais({1})}});
  ASSERT_TRUE(r12.st.is_ok()) << r12.st.message();
  EXPECT_EQ(r12.vals<float>(), (std::vector<float>{2, 4}));
  T big = T::make<uint16_t>(DType::Float16, {1, 1, 1, 2}, {0x3c00, 0x4000});  // 1, 2
  T roi = f32({0}, {});
  T sc = f32({4}, {1, 1, 1, 2});
  KRun r13("Resize", 13, {&big, &roi, &sc}, 1, {{"mode", as("linear")}});
  ASSERT_TRUE(r13.st.is_ok()) << r13.st.message();
  EXPECT_EQ(r13.vals<uint16_t>(), (std::vector<uint16_t>{0x3c00, 0x3d00, 0x3f00, 0x4000}));  // 1,1.25,1.75,2
  T u8 = T::make<uint8_t>(DType::UInt8, {1, 1, 1, 2}, {0, 255});
  KRun r14("Resize", 13, {&u8, &roi, &sc}, 1, {{"mode", as("cubic")}});
  ASSERT_TRUE(r14.st.is_ok()) << r14.st.message();
  KRun r15("Upsample", 9, {&u8, &sc}, 1);
  ASSERT_TRUE(r15.st.is_ok()) << r15.st.message();
  EXPECT_EQ(r15.vals<uint8_t>(), (std::vector<uint8_t>{0, 0, 255, 255}));
  KRun r16("Upsample", 7, {&u8}, 1, {{"scales", afs({1, 1, 1, 3})}});
  ASSERT_TRUE(r16.st.is_ok()) << r16.st.message();
  EXPECT_EQ(r16.vals<uint8_t>(), (std::vector<uint8_t>{0, 0, 0, 255, 255, 255}));
  T ccshape = i64({2}, {1, 4});
  KRun r17("CenterCropPad", 18, {&x, &ccshape}, 1);
  ASSERT_TRUE(r17.st.is_ok()) << r17.st.message();
  EXPECT_EQ(r17.vals<float>(), (std::vector<float>{0, 1, 2, 0}));
  T r64s = i64({}, {std::numeric_limits<int64_t>::min()}), r64l = i64({}, {std::numeric_limits<int64_t>::max()}),
    r64d = i64({}, {std::numeric_limits<int64_t>::max()});
  KRun r18("Range", 11, {&r64s, &r64l, &r64d}, 1);
  ASSERT_TRUE(r18.st.is_ok()) << r18.st.message();
  EXPECT_EQ(r18.vals<int64_t>(), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1,
                                                       std::numeric_limits<int64_t>::max() - 1}));
  KRun r19("EyeLike", 9, {&x}, 1, {{"k", ai(-1)}, {"dtype", ai(9)}});
  ASSERT_TRUE(r19.st.is_ok()) << r19.st.message();
  EXPECT_EQ(r19.vals<uint8_t>(), (std::vector<uint8_t>{0, 0, 1, 0}));
  KRun r20("Constant", 13, {}, 1, {{"value_ints", ais({4, 5})}});
  ASSERT_TRUE(r20.st.is_ok()) << r20.st.message();
  EXPECT_EQ(r20.vals<int64_t>(), (std::vector<int64_t>{4, 5}));
  KRun r21("Gather", 13, {&x, nullptr}, 1);
  EXPECT_ERR(r21, kInvalidArgument, "input 1 is missing");
}

}  // namespace

namespace {

// Opset 28's Mod and BitShift: fmod 0 on floats (numpy's remainder, the divisor's sign) and the
// signed integers of BitShift (wrapping left shifts, arithmetic right shifts, 0 or -1 past the
// width or for negative amounts); before opset 28 both stay refused with their messages.
TEST(KernelOpset28, ModAndBitShift) {
  T a = f32({5}, {5.5f, -5.5f, 5.5f, -4.f, 3.f});
  T b = f32({5}, {2.f, 2.f, -2.f, 2.f, -3.f});
  KRun m("Mod", 28, {&a, &b}, 1, {{"fmod", ai(0)}});
  ASSERT_TRUE(m.st.is_ok()) << m.st.message();
  const std::vector<float> r = m.vals<float>();
  EXPECT_EQ(r, (std::vector<float>{1.5f, 0.5f, -0.5f, 0.f, -0.f}));
  EXPECT_TRUE(std::signbit(r[4])) << "a zero remainder takes the divisor's sign";
  KRun old("Mod", 21, {&a, &b}, 1, {{"fmod", ai(0)}});
  EXPECT_ERR(old, kInvalidArgument, "fmod must be 1 for float inputs (before opset 28)");
  T x = i32({6}, {-8, 1, -8, 0x40000000, 5, -1});
  T s = i32({6}, {1, 31, 40, 2, -1, 3});
  KRun left("BitShift", 28, {&x, &s}, 1, {{"direction", as("LEFT")}});
  ASSERT_TRUE(left.st.is_ok()) << left.st.message();
  EXPECT_EQ(left.vals<int32_t>(), (std::vector<int32_t>{-16, std::numeric_limits<int32_t>::min(), 0, 0, 0, -8}));
  KRun right("BitShift", 28, {&x, &s}, 1, {{"direction", as("RIGHT")}});
  ASSERT_TRUE(right.st.is_ok()) << right.st.message();
  EXPECT_EQ(right.vals<int32_t>(), (std::vector<int32_t>{-4, 0, -1, 0x10000000, 0, -1}));
  KRun before("BitShift", 21, {&x, &s}, 1, {{"direction", as("LEFT")}});
  EXPECT_FALSE(before.st.is_ok());
}

}  // namespace
