#include "ir/printer.h"

#include <cstdio>
#include <sstream>

namespace cuvil {
namespace {

bool plain_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
         c == '/' || c == '-';
}

// Op types print bare only when they are identifiers, so the parser knows where they end.
bool identifier(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string dims_to_string(const std::optional<Shape>& shape) {
  if (!shape) return "[*]";
  std::string s = "[";
  for (size_t i = 0; i < shape->size(); ++i) {
    if (i) s += ", ";
    s += (*shape)[i] ? (*shape)[i]->to_string() : "?";
  }
  return s + "]";
}

std::string float_text(double v, bool is_double) {
  char buf[40];
  std::snprintf(buf, sizeof buf, is_double ? "%.17g" : "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep floats recognisable
  return s;
}

std::string tensor_to_string(const TensorData& t, const PrintOptions& opt) {
  std::string s = "tensor<";
  s += dtype_name(t.dtype);
  s += "[";
  for (size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims[i]);
  s += "]> ";
  if (t.dtype == DType::String) {
    s += "[";
    for (size_t i = 0; i < t.strings.size(); ++i) s += (i ? ", " : "") + quote(t.strings[i]);
    return s + "]";
  }
  if (t.bytes.size() > opt.inline_limit) return s + "elided<" + std::to_string(t.bytes.size()) + ">";
  if (dtype_is_integer(t.dtype) && dtype_bits(t.dtype) >= 8) {
    s += "[";
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (i) s += ", ";
      s += t.dtype == DType::UInt64 ? std::to_string(static_cast<uint64_t>(t.int_at(i)))
                                    : std::to_string(t.int_at(i));
    }
    return s + "]";
  }
  if (t.dtype == DType::Bool || t.dtype == DType::Float || t.dtype == DType::Double) {
    s += "[";
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (i) s += ", ";
      if (t.dtype == DType::Bool) s += t.int_at(i) ? "true" : "false";
      else s += float_text(t.float_at(i), t.dtype == DType::Double);
    }
    return s + "]";
  }
  static const char* kHex = "0123456789abcdef";
  s += "0x";
  for (uint8_t b : t.bytes) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

class Printer {
 public:
  Printer(std::ostream& os, const PrintOptions& opt) : os_(os), opt_(opt) {}

  void model(const Model& m) {
    os_ << "model {\n";
    os_ << "  ir_version = " << m.ir_version << "\n";
    for (const auto& [domain, version] : m.opset_imports)
      os_ << "  opset " << quote(domain) << " = " << version << "\n";
    if (!m.producer_name.empty() || !m.producer_version.empty())
      os_ << "  producer = " << quote(m.producer_name + " " + m.producer_version) << "\n";
    for (const auto& f : m.local_functions) os_ << "  inlined_function " << quote(f) << "\n";
    for (const auto& [name, r] : m.ranges.all()) {
      os_ << "  dim " << sym::DimExpr::symbol(name).to_string() << " = " << r.lo << ":";
      if (r.hi != sym::Range::kUnbounded) os_ << r.hi;
      os_ << "\n";
    }
    os_ << "}\n";
    graph(*m.graph, 0);
  }

 private:
  void indent(int n) {
    for (int i = 0; i < n; ++i) os_ << "  ";
  }

  std::string typed(const Graph& g, ValueId id) {
    const Value& v = g.value(id);
    std::string s = value_ref(v.name) + ": " + type_to_string(v);
    if (v.sym_data) {
      s += " {";
      for (size_t i = 0; i < v.sym_data->size(); ++i)
        s += (i ? ", " : "") + (*v.sym_data)[i].to_string();
      s += "}";
    }
    return s;
  }

  void graph(const Graph& g, int depth) {
    indent(depth);
    os_ << "graph " << value_ref(g.name).substr(1) << "(";
    for (size_t i = 0; i < g.inputs.size(); ++i) os_ << (i ? ", " : "") << typed(g, g.inputs[i]);
    os_ << ") -> (";
    for (size_t i = 0; i < g.outputs.size(); ++i)
      os_ << (i ? ", " : "") << value_ref(g.value(g.outputs[i]).name);
    os_ << ") {\n";
    for (ValueId c : g.captures) {
      indent(depth + 1);
      os_ << typed(g, c) << " = capture\n";
    }
    for (size_t i = 0; i < g.values.size(); ++i) {
      const Value& v = g.value(static_cast<ValueId>(i));
      if (!v.is_initializer) continue;
      indent(depth + 1);
      os_ << typed(g, static_cast<ValueId>(i)) << " = const "
          << tensor_to_string(*v.data, opt_).substr(tensor_to_string(*v.data, opt_).find("> ") + 2)
          << "\n";
    }
    for (const Node& n : g.nodes) node(g, n, depth + 1);
    indent(depth);
    os_ << "}";
    if (depth == 0) os_ << "\n";
  }

  void node(const Graph& g, const Node& n, int depth) {
    indent(depth);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (i) os_ << ", ";
      os_ << (n.outputs[i] == kNoValue ? std::string("_") : typed(g, n.outputs[i]));
    }
    os_ << (n.outputs.empty() ? "" : " ") << "= ";
    if (!n.domain.empty()) os_ << quote(n.domain) << "::";
    os_ << (identifier(n.op_type) ? n.op_type : quote(n.op_type)) << "<" << n.opset << ">(";
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (i) os_ << ", ";
      os_ << (n.inputs[i] == kNoValue ? std::string("_") : value_ref(g.value(n.inputs[i]).name));
    }
    os_ << ")";
    if (!n.attrs.empty()) {
      os_ << " {";
      bool first = true;
      for (const auto& [key, a] : n.attrs) {
        os_ << (first ? "" : ", ") << value_ref(key).substr(1) << " = ";
        first = false;
        attribute(a, depth);
      }
      os_ << "}";
    }
    os_ << " @" << quote(n.name) << "\n";
  }

  void attribute(const Attribute& a, int depth) {
    using K = Attribute::Kind;
    auto list = [&](const auto& items, auto fn) {
      os_ << "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) os_ << ", ";
        fn(items[i]);
      }
      os_ << "]";
    };
    switch (a.kind) {
      case K::Int: os_ << a.i; break;
      case K::Float: os_ << float_text(a.f, false) << "f"; break;
      case K::String: os_ << quote(a.s); break;
      case K::Tensor: os_ << tensor_to_string(*a.t, opt_); break;
      case K::Graph:
        os_ << "\n";
        graph(*a.g, depth + 1);
        break;
      case K::Ints: os_ << "ints"; list(a.ints, [&](int64_t v) { os_ << v; }); break;
      case K::Floats:
        os_ << "floats";
        list(a.floats, [&](float v) { os_ << float_text(v, false); });
        break;
      case K::Strings: os_ << "strings"; list(a.strings, [&](const std::string& v) { os_ << quote(v); }); break;
      case K::Tensors:
        os_ << "tensors";
        list(a.tensors, [&](const std::shared_ptr<const TensorData>& t) { os_ << tensor_to_string(*t, opt_); });
        break;
      case K::Graphs:
        os_ << "graphs[";
        for (size_t i = 0; i < a.graphs.size(); ++i) {
          os_ << (i ? "," : "") << "\n";
          graph(*a.graphs[i], depth + 1);
        }
        os_ << "]";
        break;
      case K::SparseTensor: case K::TypeProto: case K::SparseTensors: case K::TypeProtos:
        os_ << attribute_kind_name(a.kind);
        list(a.strings, [&](const std::string& v) { os_ << quote(v); });
        break;
    }
  }

  std::ostream& os_;
  const PrintOptions& opt_;
};

}  // namespace

std::string value_ref(const std::string& name) {
  bool plain = !name.empty() && name.back() != ':';
  for (char c : name) plain = plain && plain_name_char(c);
  return "%" + (plain ? name : quote(name));
}

std::string type_to_string(const Value& v) {
  switch (v.kind) {
    case ValueKind::Tensor: return std::string(dtype_name(v.dtype)) + dims_to_string(v.shape);
    case ValueKind::Sequence: return std::string("seq<") + dtype_name(v.dtype) + ">";
    case ValueKind::Optional:
      return std::string("opt<") + dtype_name(v.dtype) + dims_to_string(v.shape) + ">";
    default: return value_kind_name(v.kind);
  }
}

void print_model(std::ostream& os, const Model& model, const PrintOptions& options) {
  Printer(os, options).model(model);
}

std::string model_to_string(const Model& model, const PrintOptions& options) {
  std::ostringstream os;
  print_model(os, model, options);
  return os.str();
}

}  // namespace cuvil
