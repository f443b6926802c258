// cuvil-run's tensor files (cli/npy.h): suite Npy round-trips .npy files for every dtype,
// reads headers as NumPy writes them, and decodes ONNX TensorProto .pb files serialized with
// the onnx protobuf API. Suite BadNpy: the bad files of RELIABILITY.md ("huge header length,
// unknown or big-endian dtype, Fortran order, shape product overflow, truncated data"), plus
// garbage, every truncation of a valid file, and malformed TensorProtos; each gives a
// message naming the file and never crashes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cli/npy.h"
#include "onnx_builder.h"

namespace cuvil {
namespace {

using tools::HostTensor;
using Tp = onnx::TensorProto;

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in: " << (text)

// A .npy file as NumPy writes it: magic, version, little-endian header length, the header
// dict padded with spaces to a 64-byte boundary and ended by '\n', then the data.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  size_t total = prefix + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const size_t len = header.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (major != 1) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  return out + header + data;
}

std::string dict(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

std::string parse(const std::string& name, const std::string& bytes, HostTensor* t) {
  return tools::parse_npy(name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), t);
}

std::string parse_pb(const std::string& name, const std::string& bytes, HostTensor* t) {
  return tools::parse_tensor_pb(name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), t);
}

std::vector<uint8_t> pattern_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 37 + 11);
  return v;
}

// ---- Npy ----

TEST(Npy, RoundTripEveryDtype) {
  test::TempDir tmp;
  struct Case {
    int32_t dtype;
    size_t size;
  };
  const Case cases[] = {{1, 4}, {2, 1}, {3, 1}, {4, 2}, {5, 2},  {6, 4},  {7, 8},
                        {9, 1}, {10, 2}, {11, 8}, {12, 4}, {13, 8}, {14, 8}, {15, 16}};
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {}, {5}, {0, 4}, {1, 1, 2, 1, 3}};
  for (const Case& c : cases)
    for (const auto& dims : shapes) {
      SCOPED_TRACE("dtype " + std::to_string(c.dtype) + ", rank " + std::to_string(dims.size()));
      HostTensor t;
      t.dtype = c.dtype;
      t.dims = dims;
      size_t n = 1;
      for (int64_t d : dims) n *= static_cast<size_t>(d);
      t.bytes = pattern_bytes(n * c.size);
      if (c.dtype == 9)
        for (auto& b : t.bytes) b &= 1;  // bool
      const std::string path = tmp.file("t" + std::to_string(c.dtype) + "_" + std::to_string(dims.size()) + ".npy");
      ASSERT_EQ(tools::write_npy(path, t), "");
      // NumPy requires the data to start at a multiple of 64 bytes.
      std::string file = test::read_bytes(path);
      ASSERT_GE(file.size(), 10u);
      size_t header_len = static_cast<uint8_t>(file[8]) | (static_cast<size_t>(static_cast<uint8_t>(file[9])) << 8);
      EXPECT_EQ((10 + header_len) % 64, 0u);
      EXPECT_EQ(file[10 + header_len - 1], '\n');
      HostTensor back;
      ASSERT_EQ(tools::read_npy(path, &back), "");
      EXPECT_EQ(back.dtype, t.dtype);
      EXPECT_EQ(back.dims, t.dims);
      EXPECT_EQ(back.bytes, t.bytes);
    }
}

TEST(Npy, ReadsHeadersAsNumpyWritesThem) {
  HostTensor t;
  const std::string data(24, '\x01');
  // np.save of a float32 (2, 3) array, format 1.0.
  ASSERT_EQ(parse("a.npy", npy_bytes(dict("<f4", "(2, 3)"), data), &t), "");
  EXPECT_EQ(t.dtype, 1);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.bytes.size(), 24u);
  // Format 2.0 and 3.0 headers (4-byte length).
  ASSERT_EQ(parse("b.npy", npy_bytes(dict("<i8", "(3,)"), data, 2), &t), "");
  EXPECT_EQ(t.dtype, 7);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{3}));
  ASSERT_EQ(parse("c.npy", npy_bytes(dict("<f8", "()"), std::string(8, '\0'), 3), &t), "");
  EXPECT_EQ(t.dtype, 11);
  EXPECT_TRUE(t.dims.empty());
  // Single-byte types are written with '|'; '<' and '=' are accepted too.
  ASSERT_EQ(parse("d.npy", npy_bytes(dict("|u1", "(4,)"), std::string(4, 'x')), &t), "");
  EXPECT_EQ(t.dtype, 2);
  ASSERT_EQ(parse("e.npy", npy_bytes(dict("<b1", "(4,)"), std::string(4, '\1')), &t), "");
  EXPECT_EQ(t.dtype, 9);
  ASSERT_EQ(parse("f.npy", npy_bytes(dict("=f4", "(1,)"), std::string(4, '\0')), &t), "");
  EXPECT_EQ(t.dtype, 1);
  // Keys in another order, double quotes, and an empty array.
  ASSERT_EQ(parse("g.npy",
                  npy_bytes("{'shape': (0, 5), 'fortran_order': False, 'descr': \"<i4\"}", ""), &t),
            "");
  EXPECT_EQ(t.dtype, 6);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(t.bytes.empty());
}

// ---- BadNpy ----

class BadNpy : public ::testing::Test {
 protected:
  // Writes `bytes` to a file and reads it back; the error must name the file.
  std::string read_error(const std::string& bytes, const std::string& name = "bad.npy") {
    const std::string path = tmp_.file(name);
    test::write_bytes(path, bytes);
    HostTensor t;
    std::string err = tools::read_npy(path, &t);
    EXPECT_NE(err, "") << "accepted a bad file";
    EXPECT_MENTIONS(err, path);
    return err;
  }
  test::TempDir tmp_;
};

TEST_F(BadNpy, HugeHeaderLength) {
  // Format 2.0 with a 4 GiB header length.
  std::string f = npy_bytes(dict("<f4", "(1,)"), std::string(4, '\0'), 2);
  f[8] = f[9] = f[10] = f[11] = '\xff';
  EXPECT_MENTIONS(read_error(f), "too large");
  // Just under the cap, but longer than the file.
  f[8] = '\x00', f[9] = '\xff', f[10] = '\x00', f[11] = '\x00';
  EXPECT_MENTIONS(read_error(f), "truncated");
  // Format 1.0 with a header length past the end of the file.
  std::string g = npy_bytes(dict("<f4", "(1,)"), std::string(4, '\0'));
  g[8] = g[9] = '\xff';
  EXPECT_MENTIONS(read_error(g), "truncated");
}

TEST_F(BadNpy, UnknownDtype) {
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<x9", "(1,)"), std::string(4, '\0'))), "unsupported dtype '<x9'");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("O", "(1,)"), std::string(8, '\0'))), "unsupported dtype");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<U5", "(1,)"), std::string(20, '\0'))), "unsupported dtype");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("", "(1,)"), std::string(4, '\0'))), "dtype");
  // A structured dtype (a list, not a string).
  EXPECT_MENTIONS(read_error(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                                       std::string(4, '\0'))),
                  "descr");
}

TEST_F(BadNpy, BigEndianDtype) {
  EXPECT_MENTIONS(read_error(npy_bytes(dict(">f4", "(2,)"), std::string(8, '\0'))), "big-endian dtype >f4");
  EXPECT_MENTIONS(read_error(npy_bytes(dict(">i8", "(1,)"), std::string(8, '\0'))), "big-endian");
}

TEST_F(BadNpy, FortranOrder) {
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(2, 3)", "True"), std::string(24, '\0'))), "Fortran");
  // Anything but True/False is malformed, not silently C order.
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(2, 3)", "maybe"), std::string(24, '\0'))), "fortran_order");
}

TEST_F(BadNpy, ShapeProductOverflow) {
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(4294967296, 4294967296)"), "")), "overflow");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(999999999999999999, 999999999999999999)"), "")), "overflow");
  // The element count fits but the byte count does not.
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<c16", "(576460752303423488,)"), "")), "overflow");
  // Digits beyond int64.
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(99999999999999999999,)"), "")), "shape");
}

TEST_F(BadNpy, BadShape) {
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(2, -3)"), "")), "shape");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(2L, 3L)"), "")), "shape");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "[2, 3]"), "")), "shape");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(a,)"), "")), "shape");
  std::string many = "(";
  for (int i = 0; i < 40; ++i) many += "1, ";
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", many + ")"), std::string(4, '\0'))), "dims");
}

TEST_F(BadNpy, TruncatedData) {
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(2, 3)"), std::string(20, '\0'))), "20 bytes");
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(2, 3)"), std::string(20, '\0'))), "needs 24");
  // Trailing bytes are as wrong as missing ones.
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(2, 3)"), std::string(28, '\0'))), "28 bytes");
}

// The header is read and checked against the file size (fstat) before any data is read or
// allocated: a sparse 4 GiB file whose header asks for six floats is refused without reading
// its gigabytes, and so is a file that declares terabytes but holds a few bytes.
TEST_F(BadNpy, HugeSparseFileWithASmallShapeIsRefusedUnread) {
  const std::string path = tmp_.file("sparse.npy");
  const std::string head = npy_bytes(dict("<f4", "(2, 3)"), "");
  test::write_bytes(path, head);
  const int64_t size = int64_t{4} << 30;
  ASSERT_EQ(truncate(path.c_str(), size), 0);
  HostTensor t;
  std::string err = tools::read_npy(path, &t);
  EXPECT_MENTIONS(err, path);
  EXPECT_MENTIONS(err, "data has " + std::to_string(size - static_cast<int64_t>(head.size())) + " bytes");
  EXPECT_MENTIONS(err, "needs 24");
  EXPECT_TRUE(t.bytes.empty());
}

TEST_F(BadNpy, HugeShapeOverATinyFileIsRefusedUnallocated) {
  // 10^12 float32 (4 TB): allocating it first would end the process.
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f4", "(1000000, 1000000)"), std::string(8, '\0'))),
                  "data has 8 bytes but shape (1000000, 1000000) of <f4 needs 4000000000000");
  // A byte count just under int64's limit (2^63 - 2^33), over an empty data section.
  EXPECT_MENTIONS(read_error(npy_bytes(dict("<f8", "(1073741824, 1073741823)"), "")), "needs 9223372028264841216");
}

TEST_F(BadNpy, TensorProtoOverTheSizeCapIsRefusedUnread) {
  const std::string path = tmp_.file("huge.pb");
  test::write_bytes(path, "");
  ASSERT_EQ(truncate(path.c_str(), int64_t{3} << 30), 0);
  HostTensor t;
  std::string err = tools::read_tensor_pb(path, &t);
  EXPECT_MENTIONS(err, path);
  EXPECT_MENTIONS(err, std::to_string(int64_t{3} << 30) + " bytes is over the 2147483647-byte limit");
  EXPECT_MENTIONS(err, "use a .npy file");
  // At the cap it is read (and then found to be no TensorProto: zeros are field number 0).
  ASSERT_EQ(truncate(path.c_str(), 64), 0);
  EXPECT_MENTIONS(tools::read_tensor_pb(path, &t), "not a valid TensorProto");
}

TEST_F(BadNpy, EveryTruncationOfAValidFileFails) {
  const std::string good = npy_bytes(dict("<f4", "(2, 3)"), std::string(24, '\x7f'));
  HostTensor t;
  ASSERT_EQ(parse("good.npy", good, &t), "");
  for (size_t n = 0; n < good.size(); ++n) {
    std::string err = parse("cut.npy", good.substr(0, n), &t);
    EXPECT_NE(err, "") << "prefix of " << n << " bytes accepted";
    EXPECT_MENTIONS(err, "cut.npy");
  }
}

TEST_F(BadNpy, Garbage) {
  EXPECT_MENTIONS(read_error(""), "bad magic");
  EXPECT_MENTIONS(read_error("hello world, this is not numpy"), "bad magic");
  EXPECT_MENTIONS(read_error(std::string("\x93NUMPY\x09\x00\x10\x00", 10) + std::string(16, ' ')), "version 9");
  EXPECT_MENTIONS(read_error(npy_bytes("{}", "")), "lacks descr");
  EXPECT_MENTIONS(read_error(npy_bytes("{'descr': '<f4', 'shape': (1,)}", std::string(4, '\0'))), "fortran_order");
  // Random bytes behind a valid magic: no crash, an error naming the file.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string f = "\x93NUMPY";
    f += static_cast<char>(1 + rng() % 3);
    size_t n = rng() % 300;
    for (size_t k = 0; k < n; ++k) f += static_cast<char>(rng());
    HostTensor t;
    std::string err = parse("random.npy", f, &t);
    if (!err.empty()) {
      EXPECT_MENTIONS(err, "random.npy");
    }
  }
}

TEST_F(BadNpy, MissingFile) {
  HostTensor t;
  const std::string path = tmp_.file("does_not_exist.npy");
  std::string err = tools::read_npy(path, &t);
  EXPECT_MENTIONS(err, path);
  EXPECT_MENTIONS(err, "cannot open");
  err = tools::read_tensor_pb(tmp_.file("nope.pb"), &t);
  EXPECT_MENTIONS(err, tmp_.file("nope.pb"));
  // A directory is not a file.
  err = tools::read_npy(tmp_.path(), &t);
  EXPECT_MENTIONS(err, tmp_.path());
}

TEST_F(BadNpy, WriteRejectsInconsistentTensors) {
  HostTensor t;
  t.dtype = 1;
  t.dims = {2, 3};
  t.bytes.assign(20, 0);  // needs 24
  std::string err = tools::write_npy(tmp_.file("w.npy"), t);
  EXPECT_MENTIONS(err, tmp_.file("w.npy"));
  t.dtype = 8;  // string: no .npy equivalent here
  t.bytes.assign(24, 0);
  EXPECT_MENTIONS(tools::write_npy(tmp_.file("s.npy"), t), "s.npy");
  t.dtype = 1;
  EXPECT_MENTIONS(tools::write_npy(tmp_.file("missing_dir/x.npy"), t), "missing_dir/x.npy");
}

// ---- TensorProto (.pb) ----

std::string serialize(const Tp& t) {
  std::string s;
  EXPECT_TRUE(t.SerializeToString(&s));
  return s;
}

template <typename T>
std::vector<T> values_of(const HostTensor& t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(T));
  return v;
}

TEST(Npy, ParsesTensorProtos) {
  HostTensor t;
  // float, raw_data
  std::vector<float> f = {1.5f, -2.f, 0.f, 3.25f, -0.f, 1e-40f};
  ASSERT_EQ(parse_pb("raw.pb", serialize(test::make_raw_tensor("x", Tp::FLOAT, {2, 3}, test::raw_of(f))), &t), "");
  EXPECT_EQ(t.dtype, 1);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.bytes.size(), 24u);
  EXPECT_EQ(std::memcmp(t.bytes.data(), f.data(), 24), 0);
  // float, float_data
  ASSERT_EQ(parse_pb("typed.pb", serialize(test::make_float_tensor("x", {3, 2}, f)), &t), "");
  EXPECT_EQ(t.dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(std::memcmp(t.bytes.data(), f.data(), 24), 0);
  // int64_data with negative values
  ASSERT_EQ(parse_pb("i64.pb", serialize(test::make_int64_tensor("i", {4}, {-1, 0, INT64_MAX, INT64_MIN})), &t), "");
  EXPECT_EQ(t.dtype, 7);
  EXPECT_EQ(values_of<int64_t>(t), (std::vector<int64_t>{-1, 0, INT64_MAX, INT64_MIN}));
  // int8 in int32_data
  Tp i8;
  i8.set_data_type(Tp::INT8);
  i8.add_dims(3);
  for (int v : {-128, 5, 127}) i8.add_int32_data(v);
  ASSERT_EQ(parse_pb("i8.pb", serialize(i8), &t), "");
  EXPECT_EQ(t.dtype, 3);
  EXPECT_EQ(values_of<int8_t>(t), (std::vector<int8_t>{-128, 5, 127}));
  // int32 in int32_data (negative values are 10-byte varints)
  Tp i32;
  i32.set_data_type(Tp::INT32);
  i32.add_dims(2);
  i32.add_int32_data(-7);
  i32.add_int32_data(INT32_MAX);
  ASSERT_EQ(parse_pb("i32.pb", serialize(i32), &t), "");
  EXPECT_EQ(values_of<int32_t>(t), (std::vector<int32_t>{-7, INT32_MAX}));
  // double_data, uint64_data, bool
  Tp d;
  d.set_data_type(Tp::DOUBLE);
  d.add_dims(2);
  d.add_double_data(0.1);
  d.add_double_data(-1e300);
  ASSERT_EQ(parse_pb("d.pb", serialize(d), &t), "");
  EXPECT_EQ(values_of<double>(t), (std::vector<double>{0.1, -1e300}));
  Tp u;
  u.set_data_type(Tp::UINT64);
  u.add_dims(1);
  u.add_uint64_data(UINT64_MAX);
  ASSERT_EQ(parse_pb("u.pb", serialize(u), &t), "");
  EXPECT_EQ(values_of<uint64_t>(t), (std::vector<uint64_t>{UINT64_MAX}));
  Tp b;
  b.set_data_type(Tp::BOOL);
  b.add_dims(3);
  for (int v : {1, 0, 1}) b.add_int32_data(v);
  ASSERT_EQ(parse_pb("b.pb", serialize(b), &t), "");
  EXPECT_EQ(t.bytes, (std::vector<uint8_t>{1, 0, 1}));
  // A scalar and an empty tensor.
  ASSERT_EQ(parse_pb("s.pb", serialize(test::make_float_tensor("s", {}, {4.f})), &t), "");
  EXPECT_TRUE(t.dims.empty());
  EXPECT_EQ(values_of<float>(t), (std::vector<float>{4.f}));
  ASSERT_EQ(parse_pb("e.pb", serialize(test::make_float_tensor("e", {0, 3}, {})), &t), "");
  EXPECT_EQ(t.dims, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(t.bytes.empty());
  // Through a file, with unknown fields (doc_string) skipped.
  test::TempDir tmp;
  Tp withdoc = test::make_float_tensor("x", {2}, {1.f, 2.f});
  withdoc.set_doc_string("a tensor");
  test::write_bytes(tmp.file("x.pb"), serialize(withdoc));
  ASSERT_EQ(tools::read_tensor_pb(tmp.file("x.pb"), &t), "");
  EXPECT_EQ(values_of<float>(t), (std::vector<float>{1.f, 2.f}));
}

TEST_F(BadNpy, TruncatedTensorProto) {
  std::vector<float> f = {1, 2, 3, 4, 5, 6};
  // No names: the data field is then the last one, so no strict prefix is a whole tensor.
  for (Tp good : {test::make_raw_tensor("x", Tp::FLOAT, {2, 3}, test::raw_of(f)),
                  test::make_float_tensor("x", {2, 3}, f), test::make_int64_tensor("i", {3}, {1, -2, 300})}) {
    good.clear_name();
    const std::string bytes = serialize(good);
    HostTensor t;
    ASSERT_EQ(parse_pb("good.pb", bytes, &t), "");
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::string err = parse_pb("cut.pb", bytes.substr(0, n), &t);
      EXPECT_NE(err, "") << "prefix of " << n << " of " << bytes.size() << " bytes accepted";
      EXPECT_MENTIONS(err, "cut.pb");
    }
  }
}

TEST_F(BadNpy, GarbageTensorProto) {
  HostTensor t;
  const std::string path = tmp_.file("garbage.pb");
  test::write_bytes(path, std::string(32, '\xff'));
  std::string err = tools::read_tensor_pb(path, &t);
  EXPECT_MENTIONS(err, path);
  EXPECT_MENTIONS(err, "not a valid TensorProto");
  EXPECT_MENTIONS(parse_pb("empty.pb", "", &t), "empty.pb");  // no data_type
  EXPECT_MENTIONS(parse_pb("text.pb", "this is text, not a protobuf", &t), "text.pb");
  // Wire type 7 does not exist; wire types 3/4 (groups) are not used by TensorProto.
  EXPECT_MENTIONS(parse_pb("wt.pb", std::string("\x0f\x01", 2), &t), "wt.pb");
  EXPECT_MENTIONS(parse_pb("group.pb", std::string("\x0b\x0c", 2), &t), "group.pb");
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    std::string g(rng() % 64, '\0');
    for (char& c : g) c = static_cast<char>(rng());
    std::string e = parse_pb("random.pb", g, &t);
    if (!e.empty()) {
      EXPECT_MENTIONS(e, "random.pb");
    }
  }
}

TEST_F(BadNpy, MalformedTensorProto) {
  HostTensor t;
  std::vector<float> f = {1, 2, 3, 4, 5, 6};
  // raw_data size disagrees with the dims.
  EXPECT_MENTIONS(parse_pb("a.pb", serialize(test::make_raw_tensor("x", Tp::FLOAT, {2, 2}, test::raw_of(f))), &t),
                  "raw_data has 24 bytes, expected 16");
  // typed data count disagrees with the dims.
  EXPECT_MENTIONS(parse_pb("b.pb", serialize(test::make_float_tensor("x", {7}, f)), &t), "b.pb");
  EXPECT_MENTIONS(parse_pb("b2.pb", serialize(test::make_int64_tensor("x", {2}, {1, 2, 3})), &t), "b2.pb");
  // Negative dims and dims whose product overflows.
  EXPECT_MENTIONS(parse_pb("c.pb", serialize(test::make_raw_tensor("x", Tp::FLOAT, {-1, 3}, "")), &t), "negative");
  EXPECT_MENTIONS(parse_pb("d.pb", serialize(test::make_raw_tensor("x", Tp::FLOAT, {INT64_MAX, 4}, "")), &t),
                  "overflow");
  // data_type 0, unknown, and string.
  EXPECT_MENTIONS(parse_pb("e.pb", serialize(test::make_raw_tensor("x", 0, {1}, "abcd")), &t), "data_type 0");
  EXPECT_MENTIONS(parse_pb("f.pb", serialize(test::make_raw_tensor("x", 999, {1}, "abcd")), &t), "data_type 999");
  Tp s;
  s.set_data_type(Tp::STRING);
  s.add_dims(1);
  s.add_string_data("hi");
  EXPECT_MENTIONS(parse_pb("g.pb", serialize(s), &t), "data_type 8");
  // Both raw and typed data.
  Tp both = test::make_float_tensor("x", {2}, {1.f, 2.f});
  both.set_raw_data(test::raw_of(std::vector<float>{3.f, 4.f}));
  EXPECT_MENTIONS(parse_pb("h.pb", serialize(both), &t), "h.pb");
  // Typed data in the field of another type (float_data for an int64 tensor).
  Tp wrong;
  wrong.set_data_type(Tp::INT64);
  wrong.add_dims(1);
  wrong.add_float_data(1.f);
  wrong.add_float_data(2.f);
  EXPECT_MENTIONS(parse_pb("i.pb", serialize(wrong), &t), "i.pb");
  // External data is not supported by cuvil-run.
  Tp ext = test::make_raw_tensor("x", Tp::FLOAT, {2}, "");
  test::set_external(ext, "weights.bin", "0", "8");
  EXPECT_MENTIONS(parse_pb("j.pb", serialize(ext), &t), "external");
}

}  // namespace
}  // namespace cuvil
