// Test helpers for building ONNX models in C++ (onnx protobuf API) and writing them to fresh
// temporary directories, plus `FailsWith`, which checks that a call throws a cuvil Diagnostic
// with a given exit code and a message naming the culprit. Header-only so that any test file
// can include it; the bad-input and import suites (tests/frontend_*_test.cpp,
// tests/cli_bad_input_test.cpp) are its main users.
#pragma once

#include <fcntl.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/error.h"

namespace cuvil::test {

// A fresh directory from mkdtemp, removed recursively (without following symlinks) when the
// object goes out of scope.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/cuvil_test.XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
    path_ = buf.data();
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    // Directories made read-only by a test must become writable again before removal.
    nftw(path_.c_str(), [](const char* p, const struct stat* sb, int type, struct FTW*) {
      if (type == FTW_D) chmod(p, sb->st_mode | S_IRWXU);
      return 0;
    }, 16, FTW_PHYS);
    nftw(path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) {
      ::remove(p);
      return 0;
    }, 16, FTW_DEPTH | FTW_PHYS);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("cannot write " + path);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

inline std::string read_bytes(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Serializes `model` to dir/name and returns the path.
inline std::string write_model(const std::string& dir, const onnx::ModelProto& model,
                               const std::string& name = "model.onnx") {
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw std::runtime_error("cannot serialize model");
  std::string path = dir + "/" + name;
  write_bytes(path, bytes);
  return path;
}

// An empty model: ir_version 8, default-domain opset `opset`, graph "main".
inline onnx::ModelProto make_model(int64_t opset = 17, int64_t ir_version = 8) {
  onnx::ModelProto m;
  m.set_ir_version(ir_version);
  m.set_producer_name("cuvil-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  m.mutable_graph()->set_name("main");
  return m;
}

inline void add_opset(onnx::ModelProto& m, const std::string& domain, int64_t version) {
  auto* imp = m.add_opset_import();
  imp->set_domain(domain);
  imp->set_version(version);
}

// A value_info with a tensor type. Dims: a number, or a dim_param name.
struct DimSpec {
  DimSpec(int64_t v) : value(v) {}  // NOLINT
  DimSpec(const char* p) : param(p) {}  // NOLINT
  int64_t value = 0;
  std::string param;
};

inline void set_tensor_type(onnx::ValueInfoProto* vi, int32_t elem_type,
                            const std::vector<DimSpec>& dims) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (d.param.empty()) dim->set_dim_value(d.value);
    else dim->set_dim_param(d.param);
  }
}

inline onnx::ValueInfoProto* add_input(onnx::GraphProto* g, const std::string& name,
                                       int32_t elem_type = onnx::TensorProto::FLOAT,
                                       const std::vector<DimSpec>& dims = {4}) {
  auto* vi = g->add_input();
  vi->set_name(name);
  set_tensor_type(vi, elem_type, dims);
  return vi;
}

inline onnx::ValueInfoProto* add_output(onnx::GraphProto* g, const std::string& name,
                                        int32_t elem_type = onnx::TensorProto::FLOAT,
                                        const std::vector<DimSpec>& dims = {4}) {
  auto* vi = g->add_output();
  vi->set_name(name);
  set_tensor_type(vi, elem_type, dims);
  return vi;
}

inline onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op_type,
                                 const std::vector<std::string>& inputs,
                                 const std::vector<std::string>& outputs,
                                 const std::string& name = "", const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(op_type);
  if (!domain.empty()) n->set_domain(domain);
  n->set_name(name.empty() ? op_type + "_" + std::to_string(g->node_size() - 1) : name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

// ---- attributes ----
inline onnx::AttributeProto* add_attr(onnx::NodeProto* n, const std::string& name,
                                      onnx::AttributeProto::AttributeType type) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}
inline void set_attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  add_attr(n, name, onnx::AttributeProto::INT)->set_i(v);
}
inline void set_attr_float(onnx::NodeProto* n, const std::string& name, float v) {
  add_attr(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
}
inline void set_attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  add_attr(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
inline void set_attr_ints(onnx::NodeProto* n, const std::string& name,
                          const std::vector<int64_t>& v) {
  auto* a = add_attr(n, name, onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void set_attr_tensor(onnx::NodeProto* n, const std::string& name,
                            const onnx::TensorProto& t) {
  *add_attr(n, name, onnx::AttributeProto::TENSOR)->mutable_t() = t;
}
inline onnx::GraphProto* set_attr_graph(onnx::NodeProto* n, const std::string& name) {
  return add_attr(n, name, onnx::AttributeProto::GRAPH)->mutable_g();
}

// ---- tensors ----
template <typename T>
std::string raw_of(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

inline onnx::TensorProto make_raw_tensor(const std::string& name, int32_t data_type,
                                         const std::vector<int64_t>& dims,
                                         const std::string& raw) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(data_type);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(raw);
  return t;
}

inline onnx::TensorProto make_float_tensor(const std::string& name,
                                           const std::vector<int64_t>& dims,
                                           const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float v : values) t.add_float_data(v);
  return t;
}

inline onnx::TensorProto make_int64_tensor(const std::string& name,
                                           const std::vector<int64_t>& dims,
                                           const std::vector<int64_t>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t.add_dims(d);
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

// Marks `t` as external data: location plus optional offset/length written as given (so tests
// can write malformed numbers).
inline void set_external(onnx::TensorProto& t, const std::string& location,
                         const std::string& offset = "", const std::string& length = "") {
  t.clear_raw_data();
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* key, const std::string& value) {
    auto* kv = t.add_external_data();
    kv->set_key(key);
    kv->set_value(value);
  };
  add("location", location);
  if (!offset.empty()) add("offset", offset);
  if (!length.empty()) add("length", length);
}

// A Constant node producing `output` from `value`.
inline onnx::NodeProto* add_constant(onnx::GraphProto* g, const std::string& output,
                                     const onnx::TensorProto& value,
                                     const std::string& name = "") {
  auto* n = add_node(g, "Constant", {}, {output}, name.empty() ? output + "_const" : name);
  onnx::TensorProto t = value;
  t.clear_name();
  set_attr_tensor(n, "value", t);
  return n;
}

// x: f32[4] -> Relu -> y: f32[4]; the smallest valid model.
inline onnx::ModelProto make_relu_model(int64_t opset = 17) {
  onnx::ModelProto m = make_model(opset);
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_node(g, "Relu", {"x"}, {"y"}, "relu");
  add_output(g, "y");
  return m;
}

// ---- expectations ----

// Runs `f` and checks that it throws a Diagnostic with `code` whose message contains every
// string in `needles`. The failure message shows what was thrown instead.
inline ::testing::AssertionResult FailsWith(const std::function<void()>& f, ExitCode code,
                                            std::initializer_list<std::string> needles) {
  try {
    f();
  } catch (const Diagnostic& d) {
    std::string msg = d.what();
    if (d.code() != code)
      return ::testing::AssertionFailure()
             << "expected exit code " << static_cast<int>(code) << " (" << exit_code_name(code)
             << "), got " << static_cast<int>(d.code()) << " (" << exit_code_name(d.code())
             << "): " << msg;
    for (const auto& needle : needles)
      if (msg.find(needle) == std::string::npos)
        return ::testing::AssertionFailure()
               << "message does not mention '" << needle << "': " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const InternalError& e) {
    return ::testing::AssertionFailure() << "internal error instead of a diagnostic: " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "unexpected exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no diagnostic was thrown";
}

}  // namespace cuvil::test
