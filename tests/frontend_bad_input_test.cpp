// Bad ONNX inputs (RELIABILITY.md "Bad inputs the test suite must cover", ONNX models): each
// case is a named test that builds a model with the onnx protobuf API, writes it to a fresh
// temporary directory and expects the frontend (and, for attribute cases, shape inference) to
// throw a Diagnostic with the documented exit code and a message naming the culprit. None may
// crash, hang or allocate without bound; the suite also runs under ASan+UBSan (scripts/test.sh).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <random>

#include "frontend/external_data.h"
#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "onnx_builder.h"
#include "passes/infer_shapes.h"

namespace cuvil {
namespace {

using frontend::import_onnx_file;
using test::FailsWith;
using test::TempDir;
using Tp = onnx::TensorProto;

// Imports `model` from a fresh file in `dir`.
Model load(const std::string& dir, const onnx::ModelProto& model) {
  return import_onnx_file(test::write_model(dir, model));
}

// Import, verify and infer shapes: the path every attribute check is on.
Model load_and_infer(const std::string& dir, const onnx::ModelProto& model) {
  Model m = load(dir, model);
  verify_model(m);
  infer_shapes(m);
  return m;
}

// Runs `f` on another thread; false when it has not finished after `seconds` (a hang).
// `unblock` is called in that case so the thread can finish and the test can report.
bool finishes_within(double seconds, const std::function<void()>& f,
                     const std::function<void()>& unblock) {
  auto fut = std::async(std::launch::async, [&] {
    try {
      f();
    } catch (...) {
    }
  });
  if (fut.wait_for(std::chrono::duration<double>(seconds)) == std::future_status::ready)
    return true;
  unblock();
  fut.wait();
  return false;
}

std::string weight_bytes() { return test::raw_of<float>({1.f, 2.f, 3.f, 4.f}); }

// ---------------------------------------------------------------------------------------------
// External data. Layout: <tmp>/model/model.onnx with its data files, <tmp>/outside/ holding a
// valid data file the model must never reach, and <tmp>/outside.bin beside the model dir.
class BadInputExternalData : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = tmp_.file("model");
    outside_dir_ = tmp_.file("outside");
    ASSERT_EQ(mkdir(model_dir_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(outside_dir_.c_str(), 0755), 0);
    test::write_bytes(model_dir_ + "/data.bin", weight_bytes());
    test::write_bytes(outside_dir_ + "/data.bin", weight_bytes());
    test::write_bytes(tmp_.file("outside.bin"), weight_bytes());
  }

  // x: f32[4] + weights (external, f32[4]) -> y; `tensor` may be edited by `edit`.
  onnx::ModelProto model(const std::string& location, const std::string& offset = "",
                         const std::string& length = "") {
    onnx::ModelProto m = test::make_model();
    auto* g = m.mutable_graph();
    test::add_input(g, "x");
    Tp t = test::make_raw_tensor("weights", Tp::FLOAT, {4}, "");
    test::set_external(t, location, offset, length);
    *g->add_initializer() = t;
    test::add_node(g, "Add", {"x", "weights"}, {"y"}, "add");
    test::add_output(g, "y");
    return m;
  }

  Model import(const std::string& location, const std::string& offset = "",
               const std::string& length = "") {
    return load(model_dir_, model(location, offset, length));
  }

  std::vector<uint8_t> weights_of(const Model& m) {
    ValueId id = m.graph->find("weights");
    EXPECT_NE(id, kNoValue);
    if (id == kNoValue) return {};
    return m.graph->value(id).data->bytes;
  }

  TempDir tmp_;
  std::string model_dir_, outside_dir_;
};

TEST_F(BadInputExternalData, ValidExternalDataLoadsTheRightBytes) {
  const std::string want = weight_bytes();
  Model m = import("data.bin");
  EXPECT_EQ(weights_of(m), std::vector<uint8_t>(want.begin(), want.end()));

  // offset/length inside a larger file, and a file in a subdirectory.
  test::write_bytes(model_dir_ + "/packed.bin", "JUNKJUNK" + want + "TAIL");
  Model m2 = import("packed.bin", "8", "16");
  EXPECT_EQ(weights_of(m2), std::vector<uint8_t>(want.begin(), want.end()));
  ASSERT_EQ(mkdir((model_dir_ + "/sub").c_str(), 0755), 0);
  test::write_bytes(model_dir_ + "/sub/w.bin", want);
  Model m3 = import("sub/w.bin", "0", "16");
  EXPECT_EQ(weights_of(m3), std::vector<uint8_t>(want.begin(), want.end()));
  Model m4 = import("./sub/w.bin");
  EXPECT_EQ(weights_of(m4), std::vector<uint8_t>(want.begin(), want.end()));
}

TEST_F(BadInputExternalData, ParentDirectoryReference) {
  EXPECT_TRUE(FailsWith([&] { import("../outside.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'../outside.bin'", "model directory"}));
}

TEST_F(BadInputExternalData, DotDotAfterSubdirectory) {
  ASSERT_EQ(mkdir((model_dir_ + "/sub").c_str(), 0755), 0);
  EXPECT_TRUE(FailsWith([&] { import("sub/../../outside.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'sub/../../outside.bin'"}));
  // Even a ".." that stays inside the directory is refused (no string-level normalisation).
  EXPECT_TRUE(FailsWith([&] { import("sub/../data.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'sub/../data.bin'"}));
}

TEST_F(BadInputExternalData, AbsolutePath) {
  const std::string abs = outside_dir_ + "/data.bin";
  EXPECT_TRUE(FailsWith([&] { import(abs); }, ExitCode::kInvalidModel,
                        {"'weights'", abs, "absolute"}));
}

TEST_F(BadInputExternalData, SymlinkedParentDirectoryPointingOutside) {
  ASSERT_EQ(symlink(outside_dir_.c_str(), (model_dir_ + "/linkdir").c_str()), 0);
  EXPECT_TRUE(FailsWith([&] { import("linkdir/data.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'linkdir/data.bin'", "symbolic link"}));
}

TEST_F(BadInputExternalData, FinalSymlinkToFileOutside) {
  ASSERT_EQ(symlink((outside_dir_ + "/data.bin").c_str(), (model_dir_ + "/link.bin").c_str()), 0);
  EXPECT_TRUE(FailsWith([&] { import("link.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'link.bin'", "symbolic link"}));
  // A relative symlink that stays inside the directory is refused as well.
  ASSERT_EQ(symlink("data.bin", (model_dir_ + "/inside_link.bin").c_str()), 0);
  EXPECT_TRUE(FailsWith([&] { import("inside_link.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'inside_link.bin'", "symbolic link"}));
}

TEST_F(BadInputExternalData, Directory) {
  ASSERT_EQ(mkdir((model_dir_ + "/subdir").c_str(), 0755), 0);
  EXPECT_TRUE(FailsWith([&] { import("subdir"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'subdir'", "directory"}));
  EXPECT_TRUE(FailsWith([&] { import("."); }, ExitCode::kInvalidModel,
                        {"'weights'", "'.'", "directory"}));
  EXPECT_TRUE(FailsWith([&] { import("subdir/"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'subdir/'", "directory"}));
}

TEST_F(BadInputExternalData, FifoIsRefusedWithoutHanging) {
  const std::string fifo = model_dir_ + "/pipe.bin";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ::testing::AssertionResult result = ::testing::AssertionFailure() << "did not run";
  bool finished = finishes_within(
      20,
      [&] {
        result = FailsWith([&] { import("pipe.bin"); }, ExitCode::kInvalidModel,
                           {"'weights'", "'pipe.bin'", "not a regular file"});
      },
      [&] {
        // The import is blocked in open() or read(): give it a writer and data.
        int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) {
          const std::string bytes = weight_bytes();
          (void)!write(fd, bytes.data(), bytes.size());
          close(fd);
        }
      });
  EXPECT_TRUE(finished) << "importing a FIFO as external data blocked";
  EXPECT_TRUE(result);
}

TEST_F(BadInputExternalData, EmptyLocation) {
  EXPECT_TRUE(FailsWith([&] { import(""); }, ExitCode::kInvalidModel, {"'weights'", "empty"}));
  // No `location` entry at all.
  onnx::ModelProto m = model("data.bin");
  auto* t = m.mutable_graph()->mutable_initializer(0);
  t->clear_external_data();
  EXPECT_TRUE(FailsWith([&] { load(model_dir_, m); }, ExitCode::kInvalidModel,
                        {"'weights'", "empty"}));
}

TEST_F(BadInputExternalData, LocationWithNulByte) {
  // The message must survive the NUL (what() is a C string) and show it escaped.
  EXPECT_TRUE(FailsWith([&] { import(std::string("data.bin\0../x", 13)); },
                        ExitCode::kInvalidModel, {"'weights'", "'data.bin\\x00../x'", "NUL"}));
  // Terminal control bytes are escaped as well.
  EXPECT_TRUE(FailsWith([&] { import("\x1b[31m/etc/passwd"); }, ExitCode::kIo,
                        {"'weights'", "'\\x1b[31m/etc/passwd'"}));
}

TEST_F(BadInputExternalData, RepeatedKey) {
  onnx::ModelProto m = model("data.bin");
  auto* kv = m.mutable_graph()->mutable_initializer(0)->add_external_data();
  kv->set_key("location");
  kv->set_value("../outside.bin");
  EXPECT_TRUE(FailsWith([&] { load(model_dir_, m); }, ExitCode::kInvalidModel,
                        {"'weights'", "'location'", "twice"}));
}

// The component walk used where openat2 is unavailable refuses the same paths.
TEST_F(BadInputExternalData, FallbackWalkRefusesTheSamePaths) {
  ASSERT_EQ(mkdir((model_dir_ + "/sub").c_str(), 0755), 0);
  test::write_bytes(model_dir_ + "/sub/w.bin", weight_bytes());
  ASSERT_EQ(symlink(outside_dir_.c_str(), (model_dir_ + "/linkdir").c_str()), 0);
  ASSERT_EQ(symlink((outside_dir_ + "/data.bin").c_str(), (model_dir_ + "/link.bin").c_str()), 0);
  ASSERT_EQ(mkfifo((model_dir_ + "/pipe.bin").c_str(), 0644), 0);
  int dir = open(model_dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  struct Case {
    const char* location;
    int err;  // 0: opens
  };
  for (bool walk : {false, true}) {
    for (Case c : {Case{"data.bin", 0}, Case{"sub/w.bin", 0}, Case{"./sub//w.bin", 0},
                   Case{"pipe.bin", 0},  // opens without blocking; refused by type later
                   Case{"linkdir/data.bin", ELOOP}, Case{"link.bin", ELOOP},
                   Case{"../outside.bin", EXDEV}, Case{"sub/../../outside.bin", EXDEV},
                   Case{"missing.bin", ENOENT}, Case{"data.bin/x", ENOTDIR}}) {
      errno = 0;
      int fd = frontend::open_beneath(dir, c.location, walk);
      if (c.err == 0) {
        EXPECT_GE(fd, 0) << (walk ? "walk: " : "openat2: ") << c.location << ": "
                         << std::strerror(errno);
      } else {
        EXPECT_EQ(fd, -1) << (walk ? "walk: " : "openat2: ") << c.location;
        EXPECT_EQ(errno, c.err) << (walk ? "walk: " : "openat2: ") << c.location << ": "
                                << std::strerror(errno);
      }
      if (fd >= 0) close(fd);
    }
  }
  close(dir);
}

TEST_F(BadInputExternalData, OffsetPastEndOfFile) {
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "32", "16"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'data.bin'", "offset 32", "past the end", "16-byte"}));
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "17"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'data.bin'", "offset 17", "past the end"}));
}

TEST_F(BadInputExternalData, OffsetPlusLengthPastEndOfFile) {
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "8", "16"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'data.bin'", "offset 8", "length 16", "past the end"}));
}

TEST_F(BadInputExternalData, OffsetPlusLengthWrapsAround) {
  // 2^64 - 8 + 16 wraps to 8 in 64-bit arithmetic.
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "18446744073709551608", "16"); },
                        ExitCode::kInvalidModel,
                        {"'weights'", "'data.bin'", "18446744073709551608", "past the end"}));
  // A huge length with a small offset: 8 + (2^64 - 1) wraps to 7.
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "8", "18446744073709551615"); },
                        ExitCode::kInvalidModel,
                        {"'weights'", "'data.bin'", "18446744073709551615", "past the end"}));
  // 2^63 - 1 + 2^63 - 1 in signed arithmetic.
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "9223372036854775807", "9223372036854775807"); },
                        ExitCode::kInvalidModel, {"'weights'", "'data.bin'", "past the end"}));
}

TEST_F(BadInputExternalData, OffsetOrLengthNotANumber) {
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "-8", "16"); }, ExitCode::kInvalidModel,
                        {"'weights'", "offset", "'-8'"}));
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "0", "16abc"); }, ExitCode::kInvalidModel,
                        {"'weights'", "length", "'16abc'"}));
  // Beyond 2^64 - 1: out of range, not wrapped.
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "18446744073709551616", "16"); },
                        ExitCode::kInvalidModel, {"'weights'", "offset", "18446744073709551616"}));
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "0", "123456789012345678901234567890"); },
                        ExitCode::kInvalidModel, {"'weights'", "length"}));
}

TEST_F(BadInputExternalData, LengthDisagreesWithNumelTimesElementSize) {
  EXPECT_TRUE(FailsWith([&] { import("data.bin", "0", "8"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'data.bin'", "8 bytes", "needs 16"}));
  // No length: the rest of the file must be exactly the tensor.
  test::write_bytes(model_dir_ + "/long.bin", weight_bytes() + "XXXX");
  EXPECT_TRUE(FailsWith([&] { import("long.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'long.bin'", "20 bytes", "needs 16"}));
}

TEST_F(BadInputExternalData, MissingDataFile) {
  EXPECT_TRUE(FailsWith([&] { import("missing.bin"); }, ExitCode::kIo,
                        {"'weights'", "'missing.bin'", "not found"}));
  EXPECT_TRUE(FailsWith([&] { import("nodir/missing.bin"); }, ExitCode::kIo,
                        {"'weights'", "'nodir/missing.bin'"}));
}

TEST_F(BadInputExternalData, HardlinkedFile) {
  // A hard link makes a file outside the directory appear inside it.
  ASSERT_EQ(link((outside_dir_ + "/data.bin").c_str(), (model_dir_ + "/hard.bin").c_str()), 0);
  EXPECT_TRUE(FailsWith([&] { import("hard.bin"); }, ExitCode::kInvalidModel,
                        {"'weights'", "'hard.bin'", "hard links"}));
}

TEST_F(BadInputExternalData, EveryLoadPathChecksTheLocation) {
  // A Constant node's tensor attribute.
  {
    onnx::ModelProto m = test::make_model();
    auto* g = m.mutable_graph();
    Tp t = test::make_raw_tensor("", Tp::FLOAT, {4}, "");
    test::set_external(t, "../outside.bin");
    auto* c = test::add_node(g, "Constant", {}, {"y"}, "const_node");
    test::set_attr_tensor(c, "value", t);
    test::add_output(g, "y");
    EXPECT_TRUE(FailsWith([&] { load(model_dir_, m); }, ExitCode::kInvalidModel,
                          {"node 'const_node'", "attribute 'value'", "'../outside.bin'"}));
  }
  // An initializer of an If branch.
  {
    onnx::ModelProto m = test::make_model();
    auto* g = m.mutable_graph();
    test::add_input(g, "cond", Tp::BOOL, {});
    auto* n = test::add_node(g, "If", {"cond"}, {"y"}, "if_node");
    for (const char* branch : {"then_branch", "else_branch"}) {
      auto* b = test::set_attr_graph(n, branch);
      b->set_name(branch);
      Tp t = test::make_raw_tensor("branch_w", Tp::FLOAT, {4}, "");
      test::set_external(t, "../outside.bin");
      *b->add_initializer() = t;
      test::add_node(b, "Identity", {"branch_w"}, {std::string(branch) + "_out"});
      test::add_output(b, std::string(branch) + "_out");
    }
    test::add_output(g, "y");
    EXPECT_TRUE(FailsWith([&] { load(model_dir_, m); }, ExitCode::kInvalidModel,
                          {"'branch_w'", "'../outside.bin'"}));
  }
}

TEST_F(BadInputExternalData, ExternalDataWithoutAModelFile) {
  std::string bytes;
  ASSERT_TRUE(model("data.bin").SerializeToString(&bytes));
  EXPECT_TRUE(FailsWith([&] { frontend::import_onnx_bytes(bytes, ""); }, ExitCode::kInvalidModel,
                        {"'weights'", "external data"}));
}

// ---------------------------------------------------------------------------------------------
// TensorProto. The tensor is initializer "w" of: w -> Identity -> y.
class BadInputTensorProto : public ::testing::Test {
 protected:
  Model import(const Tp& t) {
    onnx::ModelProto m = test::make_model();
    auto* g = m.mutable_graph();
    *g->add_initializer() = t;
    test::add_node(g, "Identity", {t.name()}, {"y"}, "identity");
    test::add_output(g, "y");
    return load(tmp_.path(), m);
  }
  Tp tensor(int32_t data_type, const std::vector<int64_t>& dims) {
    Tp t;
    t.set_name("w");
    t.set_data_type(data_type);
    for (int64_t d : dims) t.add_dims(d);
    return t;
  }
  TempDir tmp_;
};

TEST_F(BadInputTensorProto, DimsProductOverflowsInt64) {
  Tp t = tensor(Tp::FLOAT, {int64_t{1} << 32, int64_t{1} << 32});
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel, {"'w'", "overflow"}));
  Tp t2 = tensor(Tp::FLOAT, {INT64_MAX, 2});
  EXPECT_TRUE(FailsWith([&] { import(t2); }, ExitCode::kInvalidModel, {"'w'", "overflow"}));
}

TEST_F(BadInputTensorProto, ByteSizeOverflows) {
  // numel = 2^62 fits int64, but 2^62 x 4 bytes does not fit.
  Tp t = tensor(Tp::FLOAT, {int64_t{1} << 31, int64_t{1} << 31});
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel, {"'w'", "byte size"}));
}

TEST_F(BadInputTensorProto, NegativeDims) {
  Tp t = tensor(Tp::FLOAT, {-1, 4});
  t.set_raw_data(weight_bytes());
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel,
                        {"'w'", "negative dimension -1"}));
  // Two negative dims whose product is positive and matches the data.
  Tp t2 = tensor(Tp::FLOAT, {-2, -2});
  t2.set_raw_data(weight_bytes());
  EXPECT_TRUE(FailsWith([&] { import(t2); }, ExitCode::kInvalidModel,
                        {"'w'", "negative dimension -2"}));
}

TEST_F(BadInputTensorProto, RawDataSizeDisagreesWithNumel) {
  Tp t = tensor(Tp::FLOAT, {4});
  t.set_raw_data(weight_bytes().substr(0, 15));
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel,
                        {"'w'", "raw_data", "15 bytes", "16"}));
  t.set_raw_data(weight_bytes() + "x");
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel,
                        {"'w'", "raw_data", "17 bytes", "16"}));
  // An empty raw_data for a non-empty tensor.
  t.set_raw_data("");
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel, {"'w'", "0 bytes", "16"}));
  // Int4: 5 elements need 3 bytes.
  Tp t4 = tensor(22, {5});  // INT4 (newer than the onnx headers we build against)
  t4.set_raw_data("\x12\x34");
  EXPECT_TRUE(FailsWith([&] { import(t4); }, ExitCode::kInvalidModel, {"'w'", "2 bytes", "3"}));
}

TEST_F(BadInputTensorProto, BothRawAndTypedData) {
  Tp t = tensor(Tp::FLOAT, {4});
  t.set_raw_data(weight_bytes());
  for (float v : {1.f, 2.f, 3.f, 4.f}) t.add_float_data(v);
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel,
                        {"'w'", "more than one data source"}));
  // raw_data plus external data.
  Tp t2 = tensor(Tp::FLOAT, {4});
  test::set_external(t2, "data.bin");
  t2.set_raw_data(weight_bytes());
  EXPECT_TRUE(FailsWith([&] { import(t2); }, ExitCode::kInvalidModel,
                        {"'w'", "more than one data source"}));
}

TEST_F(BadInputTensorProto, DataTypeUndefined) {
  Tp t = tensor(Tp::UNDEFINED, {4});
  t.set_raw_data(weight_bytes());
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel, {"'w'", "data_type 0"}));
}

TEST_F(BadInputTensorProto, DataTypeUnknown) {
  // Codes no ONNX version has (23..28 are onnx 1.23's newer types: BadInputGraph.NewerDataTypesAreNamed).
  for (int32_t code : {99, 29, -1}) {
    Tp t = tensor(Tp::FLOAT, {4});
    t.set_data_type(code);
    t.set_raw_data(weight_bytes());
    EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel,
                          {"'w'", "data_type " + std::to_string(code), "unknown"}));
  }
}

TEST_F(BadInputTensorProto, TypedDataWithTheWrongCount) {
  Tp t = tensor(Tp::FLOAT, {4});
  for (float v : {1.f, 2.f, 3.f}) t.add_float_data(v);
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel,
                        {"'w'", "float_data holds 3 values", "4"}));
  Tp t2 = tensor(Tp::INT64, {2});
  for (int64_t v : {1, 2, 3}) t2.add_int64_data(v);
  EXPECT_TRUE(FailsWith([&] { import(t2); }, ExitCode::kInvalidModel,
                        {"'w'", "int64_data holds 3 values", "2"}));
  // Values in the field of another dtype.
  Tp t3 = tensor(Tp::INT64, {2});
  t3.add_float_data(1.f);
  t3.add_float_data(2.f);
  EXPECT_TRUE(FailsWith([&] { import(t3); }, ExitCode::kInvalidModel,
                        {"'w'", "int64_data holds 0 values"}));
  // Complex64 needs two floats per element.
  Tp t4 = tensor(Tp::COMPLEX64, {2});
  for (float v : {1.f, 2.f}) t4.add_float_data(v);
  EXPECT_TRUE(FailsWith([&] { import(t4); }, ExitCode::kInvalidModel,
                        {"'w'", "float_data holds 2 values", "4"}));
}

TEST_F(BadInputTensorProto, NoDataForNonEmptyTensor) {
  Tp t = tensor(Tp::FLOAT, {4});
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel, {"'w'", "no data"}));
}

TEST_F(BadInputTensorProto, StringTensorWithRawData) {
  Tp t = tensor(Tp::STRING, {1});
  t.set_raw_data("abcd");
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kInvalidModel, {"'w'", "string_data"}));
  Tp t2 = tensor(Tp::STRING, {2});
  t2.add_string_data("only one");
  EXPECT_TRUE(FailsWith([&] { import(t2); }, ExitCode::kInvalidModel, {"'w'", "1 strings", "2"}));
}

TEST_F(BadInputTensorProto, SegmentedTensorIsUnsupported) {
  Tp t = tensor(Tp::FLOAT, {4});
  t.set_raw_data(weight_bytes());
  t.mutable_segment()->set_begin(0);
  t.mutable_segment()->set_end(4);
  EXPECT_TRUE(FailsWith([&] { import(t); }, ExitCode::kUnsupported, {"'w'", "segment"}));
}

TEST_F(BadInputTensorProto, BadConstantAttributeNamesTheNode) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  Tp t = test::make_raw_tensor("", Tp::FLOAT, {4}, "abc");
  auto* c = test::add_node(g, "Constant", {}, {"y"}, "my_constant");
  test::set_attr_tensor(c, "value", t);
  test::add_output(g, "y");
  EXPECT_TRUE(FailsWith([&] { load(tmp_.path(), m); }, ExitCode::kInvalidModel,
                        {"node 'my_constant'", "attribute 'value'", "3 bytes"}));
}

TEST_F(BadInputTensorProto, GraphInputTypeChecks) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {2, -3});
  test::add_node(g, "Relu", {"x"}, {"y"}, "relu");
  test::add_output(g, "y");
  EXPECT_TRUE(FailsWith([&] { load(tmp_.path(), m); }, ExitCode::kInvalidModel,
                        {"'x'", "negative dimension -3", "axis 1"}));
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(99);
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  EXPECT_TRUE(FailsWith([&] { load(tmp_.path(), m); }, ExitCode::kInvalidModel,
                        {"'x'", "elem_type 99"}));
}

// ---------------------------------------------------------------------------------------------
// Whole files.
class BadInputFile : public ::testing::Test {
 protected:
  TempDir tmp_;
};

// A small model that uses most parts of the format: an initializer, a Constant, attributes of
// several kinds, an If with subgraphs capturing outer values, a model-local function, value_info.
onnx::ModelProto rich_model() {
  onnx::ModelProto m = test::make_model(17);
  test::add_opset(m, "custom", 1);
  m.set_doc_string("a model for truncation tests");
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 4});
  test::add_input(g, "cond", Tp::BOOL, {});
  *g->add_initializer() = test::make_float_tensor("bias", {4}, {0.5f, -1.f, 2.f, 0.f});
  test::add_constant(g, "two", test::make_float_tensor("", {}, {2.f}));
  test::add_node(g, "Add", {"x", "bias"}, {"a"}, "add");
  auto* lr = test::add_node(g, "LeakyRelu", {"a"}, {"b"}, "leaky");
  test::set_attr_float(lr, "alpha", 0.1f);
  auto* iff = test::add_node(g, "If", {"cond"}, {"c"}, "if");
  auto* then_g = test::set_attr_graph(iff, "then_branch");
  then_g->set_name("then");
  test::add_node(then_g, "Mul", {"b", "two"}, {"then_out"}, "then_mul");
  test::add_output(then_g, "then_out", Tp::FLOAT, {"batch", 4});
  auto* else_g = test::set_attr_graph(iff, "else_branch");
  else_g->set_name("else");
  test::add_node(else_g, "Identity", {"b"}, {"else_out"}, "else_id");
  test::add_output(else_g, "else_out", Tp::FLOAT, {"batch", 4});
  test::add_node(g, "Twice", {"c"}, {"y"}, "twice", "custom");
  auto* vi = g->add_value_info();
  vi->set_name("a");
  test::set_tensor_type(vi, Tp::FLOAT, {"batch", 4});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 4});

  auto* f = m.add_functions();
  f->set_name("Twice");
  f->set_domain("custom");
  f->add_input("X");
  f->add_output("Y");
  auto* fo = f->add_opset_import();
  fo->set_domain("");
  fo->set_version(17);
  auto* fn = f->add_node();
  fn->set_op_type("Add");
  fn->add_input("X");
  fn->add_input("X");
  fn->add_output("Y");
  return m;
}

TEST_F(BadInputFile, EmptyFile) {
  const std::string path = tmp_.file("empty.onnx");
  test::write_bytes(path, "");
  EXPECT_TRUE(FailsWith([&] { import_onnx_file(path); }, ExitCode::kInvalidModel, {path, "empty"}));
}

TEST_F(BadInputFile, RandomBytes) {
  const std::string path = tmp_.file("random.onnx");
  int invalid = 0;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    size_t size = 1 + rng() % 2048;
    std::string bytes(size, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng() & 0xff);
    test::write_bytes(path, bytes);
    try {
      import_onnx_file(path);
      ADD_FAILURE() << "seed " << seed << ": random bytes imported as a model";
    } catch (const Diagnostic& d) {
      // Random bytes can decode as a ModelProto with a huge ir_version (exit 4); everything
      // else is an invalid model.
      EXPECT_TRUE(d.code() == ExitCode::kInvalidModel || d.code() == ExitCode::kUnsupported)
          << "seed " << seed << ": " << d.what();
      EXPECT_NE(std::string(d.what()).find(path), std::string::npos)
          << "seed " << seed << ": " << d.what();
      invalid += d.code() == ExitCode::kInvalidModel;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "seed " << seed << ": unexpected exception: " << e.what();
    }
  }
  EXPECT_GT(invalid, 150);
}

TEST_F(BadInputFile, RandomBytesAfterAValidHeader) {
  // Valid leading fields (ir_version, opset) followed by garbage.
  std::string head;
  ASSERT_TRUE(test::make_model().SerializeToString(&head));
  const std::string path = tmp_.file("garbage_tail.onnx");
  for (uint32_t seed = 1; seed <= 100; ++seed) {
    std::mt19937 rng(seed);
    std::string bytes = head;
    size_t extra = 1 + rng() % 512;
    for (size_t i = 0; i < extra; ++i) bytes.push_back(static_cast<char>(rng() & 0xff));
    test::write_bytes(path, bytes);
    try {
      import_onnx_file(path);
    } catch (const Diagnostic& d) {
      EXPECT_TRUE(d.code() == ExitCode::kInvalidModel || d.code() == ExitCode::kUnsupported)
          << "seed " << seed << ": " << d.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "seed " << seed << ": unexpected exception: " << e.what();
    }
  }
}

TEST_F(BadInputFile, TruncatedAtEveryOffset) {
  std::string bytes;
  ASSERT_TRUE(rich_model().SerializeToString(&bytes));
  ASSERT_GT(bytes.size(), 200u);
  const std::string path = tmp_.file("truncated.onnx");
  // The full model must load, so that a failure below is the truncation's doing.
  test::write_bytes(path, bytes);
  Model full = import_onnx_file(path);
  EXPECT_EQ(full.local_functions.size(), 1u);
  int rejected = 0, loaded = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    test::write_bytes(path, bytes.substr(0, n));
    try {
      Model m = import_onnx_file(path);
      verify_model(m);
      ++loaded;
    } catch (const Diagnostic& d) {
      EXPECT_EQ(d.code(), ExitCode::kInvalidModel) << "truncated at " << n << ": " << d.what();
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "truncated at " << n << ": unexpected exception: " << e.what();
    }
  }
  EXPECT_GT(rejected, 0);
  SCOPED_TRACE(::testing::Message() << loaded << " truncations loaded, " << rejected
                                    << " rejected");
}

TEST_F(BadInputFile, OverTheProtobufLimitFailsFast) {
  const std::string path = tmp_.file("huge.onnx");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::string head;
  ASSERT_TRUE(test::make_relu_model().SerializeToString(&head));
  ASSERT_EQ(write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  // Sparse: no disk space, no time.
  ASSERT_EQ(ftruncate(fd, (off_t{1} << 31) + 4096), 0);
  close(fd);
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(FailsWith([&] { import_onnx_file(path); }, ExitCode::kInvalidModel,
                        {path, "2 GiB", "external data"}));
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0) << "the size check must come before reading the file";
}

TEST_F(BadInputFile, MissingFile) {
  const std::string path = tmp_.file("nope.onnx");
  EXPECT_TRUE(FailsWith([&] { import_onnx_file(path); }, ExitCode::kIo, {path}));
}

TEST_F(BadInputFile, DirectoryInsteadOfAFile) {
  EXPECT_TRUE(FailsWith([&] { import_onnx_file(tmp_.path()); }, ExitCode::kIo,
                        {tmp_.path(), "not a regular file"}));
}

TEST_F(BadInputFile, FifoInsteadOfAFile) {
  const std::string fifo = tmp_.file("model.onnx");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ::testing::AssertionResult result = ::testing::AssertionFailure() << "did not run";
  bool finished = finishes_within(
      20, [&] { result = FailsWith([&] { import_onnx_file(fifo); }, ExitCode::kIo, {fifo}); },
      [&] {
        int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) close(fd);
      });
  EXPECT_TRUE(finished) << "importing a FIFO blocked";
  EXPECT_TRUE(result);
}

TEST_F(BadInputFile, AnotherProtobufMessage) {
  // A serialized TensorProto is valid protobuf but not a model.
  std::string bytes;
  ASSERT_TRUE(test::make_float_tensor("t", {2}, {1.f, 2.f}).SerializeToString(&bytes));
  const std::string path = tmp_.file("tensor.pb");
  test::write_bytes(path, bytes);
  EXPECT_TRUE(FailsWith([&] { import_onnx_file(path); }, ExitCode::kInvalidModel, {path}));
  test::write_bytes(path, "ir_version: 8\nproducer_name: \"text format\"\n");
  EXPECT_TRUE(FailsWith([&] { import_onnx_file(path); }, ExitCode::kInvalidModel, {path}));
}

// ---------------------------------------------------------------------------------------------
// Graph structure.
class BadInputGraph : public ::testing::Test {
 protected:
  Model import(const onnx::ModelProto& m) { return load(tmp_.path(), m); }
  Model import(const onnx::ModelProto& m, const CompileLimits& limits) {
    frontend::ImportOptions o;
    o.limits = limits;
    return import_onnx_file(test::write_model(tmp_.path(), m), o);
  }
  TempDir tmp_;
};

TEST_F(BadInputGraph, Cycle) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Add", {"x", "b"}, {"a"}, "node_a");
  test::add_node(g, "Relu", {"a"}, {"b"}, "node_b");
  test::add_output(g, "b");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"cycle", "'node_a'", "'node_b'"}));
}

// Found by mutating control-flow models: once a read past the end of the node list.
TEST_F(BadInputGraph, NodeListsAnOutputTwice) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Split", {"x"}, {"a", "a"}, "split_node");
  test::add_output(g, "a");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"node 'split_node' (Split) lists output 'a' twice"}));
}

TEST_F(BadInputGraph, NodeReadsItsOwnOutput) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Add", {"x", "a"}, {"a"}, "self_loop");
  test::add_output(g, "a");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"'self_loop'", "'a'", "cycle"}));
}

TEST_F(BadInputGraph, CycleThroughASubgraph) {
  // The If's branch reads a value that is computed from the If's own output.
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "cond", Tp::BOOL, {});
  auto* iff = test::add_node(g, "If", {"cond"}, {"c"}, "if_node");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* b = test::set_attr_graph(iff, branch);
    test::add_node(b, "Identity", {"d"}, {std::string(branch) + "_out"});
    test::add_output(b, std::string(branch) + "_out");
  }
  test::add_node(g, "Relu", {"c"}, {"d"}, "relu_node");
  test::add_output(g, "d");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"cycle", "'if_node'", "'relu_node'"}));
}

TEST_F(BadInputGraph, UndefinedValue) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Add", {"x", "nowhere"}, {"y"}, "adder");
  test::add_output(g, "y");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"node 'adder'", "undefined value 'nowhere'"}));
}

TEST_F(BadInputGraph, UndefinedValueInASubgraph) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "cond", Tp::BOOL, {});
  auto* iff = test::add_node(g, "If", {"cond"}, {"y"}, "if_node");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* b = test::set_attr_graph(iff, branch);
    test::add_node(b, "Identity", {"ghost"}, {std::string(branch) + "_out"},
                   std::string(branch) + "_identity");
    test::add_output(b, std::string(branch) + "_out");
  }
  test::add_output(g, "y");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"node 'then_branch_identity'", "undefined value 'ghost'"}));
}

TEST_F(BadInputGraph, ValueDefinedTwice) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Relu", {"x"}, {"t"}, "first");
  test::add_node(g, "Neg", {"x"}, {"t"}, "second");
  test::add_output(g, "t");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"'t'", "defined twice", "'first'", "'second'"}));
}

TEST_F(BadInputGraph, NodeRedefinesAGraphInputOrInitializer) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_input(g, "z");
  test::add_node(g, "Relu", {"z"}, {"x"}, "clobber");
  test::add_output(g, "x");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"'x'", "defined twice", "graph input", "'clobber'"}));

  onnx::ModelProto m2 = test::make_model();
  auto* g2 = m2.mutable_graph();
  test::add_input(g2, "x");
  *g2->add_initializer() = test::make_float_tensor("w", {4}, {1, 2, 3, 4});
  test::add_node(g2, "Relu", {"x"}, {"w"}, "clobber_w");
  test::add_output(g2, "w");
  EXPECT_TRUE(FailsWith([&] { import(m2); }, ExitCode::kInvalidModel,
                        {"'w'", "defined twice", "initializer", "'clobber_w'"}));

  onnx::ModelProto m3 = test::make_model();
  auto* g3 = m3.mutable_graph();
  *g3->add_initializer() = test::make_float_tensor("w", {4}, {1, 2, 3, 4});
  *g3->add_initializer() = test::make_float_tensor("w", {4}, {1, 2, 3, 4});
  test::add_node(g3, "Relu", {"w"}, {"y"}, "relu");
  test::add_output(g3, "y");
  EXPECT_TRUE(FailsWith([&] { import(m3); }, ExitCode::kInvalidModel,
                        {"initializer 'w'", "defined twice"}));
}

TEST_F(BadInputGraph, DuplicateGraphOutputs) {
  onnx::ModelProto m = test::make_relu_model();
  test::add_output(m.mutable_graph(), "y");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"output 'y'", "listed twice"}));
}

TEST_F(BadInputGraph, OutputNeverProduced) {
  onnx::ModelProto m = test::make_relu_model();
  test::add_output(m.mutable_graph(), "phantom");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"output 'phantom'", "never produced"}));
}

TEST_F(BadInputGraph, NoGraphOrNoOutputs) {
  onnx::ModelProto m = test::make_model();
  m.clear_graph();
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel, {"no graph"}));
  onnx::ModelProto m2 = test::make_relu_model();
  m2.mutable_graph()->clear_output();
  EXPECT_TRUE(FailsWith([&] { import(m2); }, ExitCode::kInvalidModel, {"'main'", "no outputs"}));
}

// If nodes nested `depth` levels: level k's then_branch holds level k+1.
onnx::GraphProto nested_ifs(int depth, int level = 0) {
  onnx::GraphProto g;
  g.set_name("level" + std::to_string(level));
  const std::string out = "out" + std::to_string(level);
  if (level == depth) {
    test::add_node(&g, "Identity", {"x"}, {out}, "leaf");
  } else {
    auto* iff = test::add_node(&g, "If", {"cond"}, {out}, "if" + std::to_string(level));
    *test::set_attr_graph(iff, "then_branch") = nested_ifs(depth, level + 1);
    auto* e = test::set_attr_graph(iff, "else_branch");
    e->set_name("else" + std::to_string(level));
    test::add_node(e, "Identity", {"x"}, {"else_out" + std::to_string(level)});
    test::add_output(e, "else_out" + std::to_string(level));
  }
  test::add_output(&g, out);
  return g;
}

onnx::ModelProto nested_if_model(int depth) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  *g = nested_ifs(depth);
  g->set_name("main");
  test::add_input(g, "x");
  test::add_input(g, "cond", Tp::BOOL, {});
  return m;
}

TEST_F(BadInputGraph, SubgraphNestingBeyondTheCap) {
  const int64_t cap = CompileLimits{}.max_nesting_depth;
  ASSERT_LT(cap, 40) << "the test nests 40 levels";
  // Refused by the wire-format scan before the parse, exit 4 naming the cap and its option.
  EXPECT_TRUE(FailsWith([&] { import(nested_if_model(40)); }, ExitCode::kUnsupported,
                        {"nested " + std::to_string(cap + 1) + " levels deep",
                         "max_nesting_depth = " + std::to_string(cap), "--max-nesting-depth",
                         "limits.max_nesting_depth"}));
  // Within the cap: imports, with each level capturing x and cond from the one above.
  Model ok = import(nested_if_model(static_cast<int>(cap)));
  verify_model(ok);
  // The cap is the option's value: 40 levels import when it is raised.
  CompileLimits raised;
  raised.max_nesting_depth = 40;
  verify_model(import(nested_if_model(40), raised));
  CompileLimits lowered;
  lowered.max_nesting_depth = 3;
  EXPECT_TRUE(FailsWith([&] { import(nested_if_model(4), lowered); }, ExitCode::kUnsupported,
                        {"nested 4 levels deep", "max_nesting_depth = 3"}));
}

TEST_F(BadInputGraph, SubgraphNestingBeyondTheParserLimit) {
  // Deeper than protobuf's recursion limit: with the nesting cap raised past it, refused by
  // the parser (the wire scan stops descending at the same limit), no stack overflow.
  CompileLimits raised;
  raised.max_nesting_depth = 1000;
  EXPECT_TRUE(FailsWith([&] { import(nested_if_model(500), raised); }, ExitCode::kInvalidModel,
                        {tmp_.file("model.onnx"), "protobuf parse failed"}));
  // With the default cap the scan refuses it first.
  EXPECT_TRUE(FailsWith([&] { import(nested_if_model(500)); }, ExitCode::kUnsupported,
                        {"max_nesting_depth"}));
}

TEST_F(BadInputGraph, IrVersionBeyondTheSupportedMaximum) {
  onnx::ModelProto m = test::make_relu_model();
  m.set_ir_version(frontend::kMaxIrVersion + 1);
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                        {"ir_version " + std::to_string(frontend::kMaxIrVersion + 1),
                         std::to_string(frontend::kMaxIrVersion)}));
  m.clear_ir_version();
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel, {"no ir_version"}));
}

// Fields onnx.proto gained after IR 8 arrive as unknown fields of cuvil's (onnx 1.12) schema:
// refused, naming the field, its message and where it is, rather than dropped; metadata_props
// and a function's value_info, annotations without meaning for the computation, pass.
TEST_F(BadInputGraph, FieldsNewerThanTheSchemaAreRefused) {
  onnx::ModelProto m = test::make_relu_model();
  m.mutable_graph()->mutable_node(0)->mutable_unknown_fields()->AddLengthDelimited(8, "v2");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                        {"graph.node[0] (onnx.NodeProto) has field 8 'overload', added to ONNX after IR 8",
                         "does not know"}));
  // A field no schema names: the number and the message.
  onnx::ModelProto m2 = test::make_relu_model();
  m2.mutable_graph()->mutable_input(0)->mutable_type()->mutable_unknown_fields()->AddVarint(77, 1);
  EXPECT_TRUE(FailsWith([&] { import(m2); }, ExitCode::kUnsupported,
                        {"graph.input[0].type (onnx.TypeProto) has field 77 which"}));
  // FunctionProto.attribute_proto (default attribute values) would change what a call computes.
  onnx::ModelProto m3 = test::make_relu_model();
  auto* f = m3.add_functions();
  f->set_name("f");
  f->set_domain("local");
  f->mutable_unknown_fields()->AddLengthDelimited(11, "");
  EXPECT_TRUE(FailsWith([&] { import(m3); }, ExitCode::kUnsupported,
                        {"functions[0] (onnx.FunctionProto) has field 11 'attribute_proto'"}));
  // metadata_props on a node, a value and a graph: accepted.
  onnx::ModelProto m4 = test::make_relu_model();
  onnx::StringStringEntryProto entry;
  entry.set_key("namespace");
  entry.set_value("torch");
  m4.mutable_graph()->mutable_node(0)->mutable_unknown_fields()->AddLengthDelimited(9, entry.SerializeAsString());
  m4.mutable_graph()->mutable_input(0)->mutable_unknown_fields()->AddLengthDelimited(4, entry.SerializeAsString());
  m4.mutable_graph()->mutable_unknown_fields()->AddLengthDelimited(16, entry.SerializeAsString());
  EXPECT_EQ(import(m4).graph->nodes.size(), 1u);
  // A function's value_info (types only): accepted too.
  onnx::ModelProto m5 = test::make_relu_model();
  auto* f5 = m5.add_functions();
  f5->set_name("f");
  f5->set_domain("local");
  onnx::ValueInfoProto vi;
  vi.set_name("t");
  f5->mutable_unknown_fields()->AddLengthDelimited(12, vi.SerializeAsString());
  EXPECT_EQ(import(m5).graph->nodes.size(), 1u);
}

// Data types added after cuvil's (onnx 1.23: FLOAT4E2M1 .. FLOAT6E3M2) are refused as unsupported,
// named; a code no ONNX version has stays an invalid model.
TEST_F(BadInputGraph, NewerDataTypesAreNamed) {
  onnx::ModelProto m = test::make_relu_model();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(23);
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                        {"graph input 'x' has type FLOAT4E2M1 (elem_type 23), which cuvil does not support"}));
  onnx::ModelProto m2 = test::make_relu_model();
  onnx::TensorProto* t = m2.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(26);
  t->add_dims(1);
  t->set_raw_data(std::string(1, '\0'));
  EXPECT_TRUE(FailsWith([&] { import(m2); }, ExitCode::kUnsupported, {"tensor 'w': data type INT2 (26) is not supported"}));
  onnx::ModelProto m3 = test::make_relu_model();
  m3.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(28);
  EXPECT_TRUE(FailsWith([&] { import(m3); }, ExitCode::kUnsupported, {"FLOAT6E3M2 (elem_type 28)"}));
  m3.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(99);
  EXPECT_TRUE(FailsWith([&] { import(m3); }, ExitCode::kInvalidModel, {"unknown elem_type 99"}));
}

TEST_F(BadInputGraph, DefaultOpsetBeyondTheSupportedMaximum) {
  onnx::ModelProto m = test::make_relu_model(frontend::kMaxDefaultOpset + 1);
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                        {"opset " + std::to_string(frontend::kMaxDefaultOpset + 1),
                         std::to_string(frontend::kMaxDefaultOpset)}));
  // "ai.onnx" is the default domain too.
  onnx::ModelProto m2 = test::make_relu_model();
  m2.mutable_opset_import(0)->set_domain("ai.onnx");
  m2.mutable_opset_import(0)->set_version(1000);
  EXPECT_TRUE(FailsWith([&] { import(m2); }, ExitCode::kUnsupported, {"opset 1000"}));
  onnx::ModelProto m3 = test::make_relu_model(0);
  EXPECT_TRUE(FailsWith([&] { import(m3); }, ExitCode::kInvalidModel, {"version 0"}));
}

TEST_F(BadInputGraph, UnknownDomainsAndOpsAreListedAllAtOnce) {
  onnx::ModelProto m = test::make_model();
  test::add_opset(m, "com.example", 1);
  test::add_opset(m, "org.other", 3);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_input(g, "cond", Tp::BOOL, {});
  test::add_node(g, "Frobnicate", {"x"}, {"a"}, "frob_1", "com.example");
  test::add_node(g, "Frobnicate", {"a"}, {"b"}, "frob_2", "com.example");
  test::add_node(g, "NotAnOnnxOp", {"b"}, {"c"}, "bogus_default", "");
  auto* iff = test::add_node(g, "If", {"cond"}, {"d"}, "if_node");
  auto* t = test::set_attr_graph(iff, "then_branch");
  t->set_name("then");
  test::add_node(t, "Thing", {"c"}, {"t_out"}, "thing_in_branch", "org.other");
  test::add_output(t, "t_out");
  auto* e = test::set_attr_graph(iff, "else_branch");
  e->set_name("else");
  test::add_node(e, "Identity", {"c"}, {"e_out"}, "else_id");
  test::add_output(e, "e_out");
  test::add_output(g, "d");

  Model model = import(m);  // unknown ops import; they are reported together
  auto unsupported = frontend::find_unsupported(model);
  ASSERT_EQ(unsupported.size(), 4u);
  EXPECT_EQ(unsupported[3].node_name, "thing_in_branch");
  EXPECT_EQ(unsupported[3].graph_name, "then");
  EXPECT_EQ(unsupported[3].domain, "org.other");
  EXPECT_TRUE(FailsWith([&] { frontend::check_supported(model); }, ExitCode::kUnsupported,
                        {"4 node(s)", "com.example::Frobnicate (2)", "'frob_1'", "'frob_2'",
                         "NotAnOnnxOp", "'bogus_default'", "org.other::Thing",
                         "'thing_in_branch'"}));
}

// A model-local function calling itself.
TEST_F(BadInputGraph, RecursiveFunction) {
  onnx::ModelProto m = test::make_model();
  test::add_opset(m, "custom", 1);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Loopy", {"x"}, {"y"}, "call", "custom");
  test::add_output(g, "y");
  auto* f = m.add_functions();
  f->set_name("Loopy");
  f->set_domain("custom");
  f->add_input("X");
  f->add_output("Y");
  auto* fn = f->add_node();
  fn->set_op_type("Loopy");
  fn->set_domain("custom");
  fn->add_input("X");
  fn->add_output("Y");
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kInvalidModel,
                        {"'call'", "custom::Loopy", "calls itself"}));
}

// Function k calls function k+1 twice: 2^depth nodes after inlining from a tiny file.
TEST_F(BadInputGraph, FunctionInliningBlowUpIsCapped) {
  onnx::ModelProto m = test::make_model();
  test::add_opset(m, "custom", 1);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "F0", {"x"}, {"y"}, "call", "custom");
  test::add_output(g, "y");
  const int depth = 30;
  for (int k = 0; k <= depth; ++k) {
    auto* f = m.add_functions();
    f->set_name("F" + std::to_string(k));
    f->set_domain("custom");
    f->add_input("X");
    f->add_output("Y");
    auto* fo = f->add_opset_import();
    fo->set_domain("custom");
    fo->set_version(1);
    auto* fo2 = f->add_opset_import();
    fo2->set_domain("");
    fo2->set_version(17);
    if (k == depth) {
      auto* n = f->add_node();
      n->set_op_type("Relu");
      n->add_input("X");
      n->add_output("Y");
      continue;
    }
    for (int c = 0; c < 2; ++c) {
      auto* n = f->add_node();
      n->set_op_type("F" + std::to_string(k + 1));
      n->set_domain("custom");
      n->add_input(c == 0 ? "X" : "T");
      n->add_output(c == 0 ? "T" : "Y");
    }
  }
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                        {"'call'", "inlining 'custom::F", "max_inlined_nodes = 1048576",
                         "--max-inlined-nodes"}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
}

// ---------------------------------------------------------------------------------------------
// Attributes and shapes: checked by shape inference, the first pass that reads them.
class BadInputAttributes : public ::testing::Test {
 protected:
  Model infer(const onnx::ModelProto& m) { return load_and_infer(tmp_.path(), m); }
  // With the tensor-element cap lifted: what shape inference itself does with huge shapes.
  Model infer_uncapped(const onnx::ModelProto& m) {
    Model model = load(tmp_.path(), m);
    verify_model(model);
    CompileLimits limits;
    limits.max_tensor_elements = INT64_MAX;
    infer_shapes(model, limits);
    return model;
  }

  // X: f32[1, 2, 8, 8], W: f32[4, 2, 3, 3] initializer -> Conv -> y.
  onnx::ModelProto conv_model(const std::function<void(onnx::NodeProto*)>& edit) {
    onnx::ModelProto m = test::make_model();
    auto* g = m.mutable_graph();
    test::add_input(g, "X", Tp::FLOAT, {1, 2, 8, 8});
    *g->add_initializer() = test::make_float_tensor("W", {4, 2, 3, 3}, std::vector<float>(72, 0.5f));
    auto* n = test::add_node(g, "Conv", {"X", "W"}, {"y"}, "conv_node");
    edit(n);
    test::add_output(g, "y", Tp::FLOAT, {});
    g->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    return m;
  }

  TempDir tmp_;
};

TEST_F(BadInputAttributes, ConvStrideZero) {
  auto m = conv_model([](onnx::NodeProto* n) { test::set_attr_ints(n, "strides", {0, 1}); });
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'conv_node'", "strides"}));
}

TEST_F(BadInputAttributes, ConvDilationZero) {
  auto m = conv_model([](onnx::NodeProto* n) { test::set_attr_ints(n, "dilations", {1, 0}); });
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'conv_node'", "dilations"}));
}

TEST_F(BadInputAttributes, ConvGroupZero) {
  auto m = conv_model([](onnx::NodeProto* n) { test::set_attr_int(n, "group", 0); });
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'conv_node'", "group"}));
  auto m2 = conv_model([](onnx::NodeProto* n) { test::set_attr_int(n, "group", -2); });
  EXPECT_TRUE(FailsWith([&] { infer(m2); }, ExitCode::kInvalidModel, {"'conv_node'", "group"}));
}

TEST_F(BadInputAttributes, ConvNegativePads) {
  auto m = conv_model([](onnx::NodeProto* n) { test::set_attr_ints(n, "pads", {1, -1, 1, 1}); });
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'conv_node'", "pads"}));
}

TEST_F(BadInputAttributes, ConvValidAttributesInfer) {
  auto m = conv_model([](onnx::NodeProto* n) {
    test::set_attr_ints(n, "strides", {2, 2});
    test::set_attr_ints(n, "pads", {1, 1, 1, 1});
  });
  Model model = infer(m);
  const Value& y = model.graph->value(model.graph->find("y"));
  ASSERT_TRUE(y.shape_known());
  EXPECT_EQ(*(*y.shape)[2]->constant(), 4);
}

// data: f32[data_dims] -> op(data, const int64 `values`) -> y.
onnx::ModelProto const_input_model(const std::string& op, const std::vector<test::DimSpec>& data_dims,
                                   const std::vector<int64_t>& values, int64_t opset = 17) {
  onnx::ModelProto m = test::make_model(opset);
  auto* g = m.mutable_graph();
  test::add_input(g, "data", Tp::FLOAT, data_dims);
  test::add_constant(g, "second",
                     test::make_int64_tensor("", {static_cast<int64_t>(values.size())}, values),
                     "second_const");
  std::string lower = op;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  test::add_node(g, op, {"data", "second"}, {"y"}, lower + "_node");
  test::add_output(g, "y", Tp::FLOAT, {});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  return m;
}

TEST_F(BadInputAttributes, ReshapeWithTwoMinusOnes) {
  auto m = const_input_model("Reshape", {2, 3, 4}, {-1, -1});
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'reshape_node'", "-1"}));
}

TEST_F(BadInputAttributes, ReshapeElementCountMismatch) {
  auto m = const_input_model("Reshape", {2, 3, 4}, {5, 5});
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel,
                        {"'reshape_node'", "[2, 3, 4]", "[5, 5]"}));
  // -1 that cannot divide the rest.
  auto m2 = const_input_model("Reshape", {2, 3, 4}, {5, -1});
  EXPECT_TRUE(FailsWith([&] { infer(m2); }, ExitCode::kInvalidModel, {"'reshape_node'"}));
}

TEST_F(BadInputAttributes, SplitSizesNotSummingToTheAxis) {
  auto m = const_input_model("Split", {6, 2}, {2, 2});
  m.mutable_graph()->mutable_node(1)->add_output("y2");
  test::add_output(m.mutable_graph(), "y2", Tp::FLOAT, {});
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'split_node'", "6"}));
  // Opset 11: split is an attribute.
  onnx::ModelProto m2 = test::make_model(11);
  auto* g = m2.mutable_graph();
  test::add_input(g, "data", Tp::FLOAT, {6, 2});
  auto* n = test::add_node(g, "Split", {"data"}, {"a", "b"}, "split_attr_node");
  test::set_attr_ints(n, "split", {4, 4});
  test::add_output(g, "a", Tp::FLOAT, {});
  test::add_output(g, "b", Tp::FLOAT, {});
  EXPECT_TRUE(FailsWith([&] { infer(m2); }, ExitCode::kInvalidModel, {"'split_attr_node'", "6"}));
}

TEST_F(BadInputAttributes, BroadcastIncompatibleShapes) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, {2, 3});
  *g->add_initializer() = test::make_float_tensor("b", {4, 3}, std::vector<float>(12, 1.f));
  test::add_node(g, "Add", {"a", "b"}, {"y"}, "add_node");
  test::add_output(g, "y", Tp::FLOAT, {2, 3});
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'add_node'", "broadcast"}));
}

TEST_F(BadInputAttributes, ConstantGatherIndicesOutOfRangeOfConstantData) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  *g->add_initializer() = test::make_int64_tensor("table", {3}, {10, 20, 30});
  test::add_constant(g, "idx", test::make_int64_tensor("", {2}, {1, 3}));
  test::add_node(g, "Gather", {"table", "idx"}, {"y"}, "gather_node");
  test::add_output(g, "y", Tp::INT64, {2});
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel,
                        {"'gather_node'", "index 3", "'table'"}));
}

// Constant indices against a known (non-constant) data extent.
TEST_F(BadInputAttributes, ConstantGatherIndicesOutOfRangeOfKnownDim) {
  auto m = const_input_model("Gather", {3, 4}, {1, 5});
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kInvalidModel, {"'gather_node'", "5"}));
  auto m2 = const_input_model("Gather", {3, 4}, {-4});
  EXPECT_TRUE(FailsWith([&] { infer(m2); }, ExitCode::kInvalidModel, {"'gather_node'", "-4"}));
}

TEST_F(BadInputAttributes, HugeConstantOfShapeIsNotMaterialised) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  const int64_t huge = int64_t{1} << 40;
  test::add_constant(g, "shape", test::make_int64_tensor("", {2}, {huge, huge}));
  test::add_node(g, "ConstantOfShape", {"shape"}, {"y"}, "cos_node");
  test::add_output(g, "y", Tp::FLOAT, {});
  // By default the output is over max_tensor_elements: refused, naming the node.
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kUnsupported,
                        {"node 'cos_node' (ConstantOfShape)", "output 'y'", "max_tensor_elements"}));
  auto start = std::chrono::steady_clock::now();
  Model model = infer_uncapped(m);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  const Value& y = model.graph->value(model.graph->find("y"));
  EXPECT_EQ(y.data, nullptr);
  ASSERT_TRUE(y.shape.has_value());
  ASSERT_EQ(y.shape->size(), 2u);
  ASSERT_TRUE((*y.shape)[0] && (*y.shape)[1]);
  EXPECT_EQ((*y.shape)[0]->constant(), huge);
  EXPECT_EQ((*y.shape)[1]->constant(), huge);
}

TEST_F(BadInputAttributes, HugeExpandIsNotMaterialised) {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  const int64_t huge = int64_t{1} << 40;
  *g->add_initializer() = test::make_float_tensor("one", {1}, {1.f});
  test::add_constant(g, "shape", test::make_int64_tensor("", {2}, {huge, huge}));
  test::add_node(g, "Expand", {"one", "shape"}, {"y"}, "expand_node");
  test::add_output(g, "y", Tp::FLOAT, {});
  EXPECT_TRUE(FailsWith([&] { infer(m); }, ExitCode::kUnsupported,
                        {"node 'expand_node' (Expand)", "output 'y'", "max_tensor_elements"}));
  auto start = std::chrono::steady_clock::now();
  Model model = infer_uncapped(m);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  const Value& y = model.graph->value(model.graph->find("y"));
  EXPECT_EQ(y.data, nullptr);
  ASSERT_TRUE(y.shape.has_value());
  ASSERT_EQ(y.shape->size(), 2u);
  ASSERT_TRUE((*y.shape)[0] && (*y.shape)[1]);
  EXPECT_EQ((*y.shape)[0]->constant(), huge);
  EXPECT_EQ((*y.shape)[1]->constant(), huge);
}

}  // namespace
}  // namespace cuvil
