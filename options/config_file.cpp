// The YAML config reader (yaml-cpp): maps a config file onto CompileOptions, refusing anything
// it does not understand. The schema is the table kTopLevelKeys below plus support/limits.def
// for `limits:`; docs/config.md describes both. Messages are `FILE:LINE:COLUMN: key.path: what`,
// with 1-based line and column as editors show them.
#include "options/compile_options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <functional>
#include <set>

#include "support/error.h"

namespace cuvil {
namespace {

class ConfigReader {
 public:
  explicit ConfigReader(const std::string& display_name) : name_(display_name) {}

  template <typename... Parts>
  [[noreturn]] void fail_at(const YAML::Mark& mark, const Parts&... parts) const {
    if (mark.is_null()) fail(ExitCode::kUsage, name_, ": ", parts...);
    fail(ExitCode::kUsage, name_, ":", mark.line + 1, ":", mark.column + 1, ": ", parts...);
  }

  // Calls visit(key, value, path) for every entry of a map, refusing non-string keys,
  // duplicates and keys outside `known`.
  void for_each_entry(const YAML::Node& map, const std::string& path,
                      const std::vector<std::string>& known,
                      const std::function<void(const std::string&, const YAML::Node&,
                                               const std::string&)>& visit) const {
    if (!map.IsMap())
      fail_at(map.Mark(), path.empty() ? "the config" : path, " must be a mapping (key: value), got ",
              kind_name(map));
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) fail_at(key.Mark(), path.empty() ? "" : path + ": ", "keys must be plain names");
      const std::string k = key.Scalar();
      const std::string full = path.empty() ? k : path + "." + k;
      if (!known.empty() && std::find(known.begin(), known.end(), k) == known.end()) {
        std::string list;
        for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
        fail_at(key.Mark(), "unknown key '", full, "' (known", path.empty() ? "" : " under '" + path + "'",
                ": ", list, ")");
      }
      if (!seen.insert(k).second) fail_at(key.Mark(), "duplicate key '", full, "'");
      visit(k, entry.second, full);
    }
  }

  std::string scalar(const YAML::Node& v, const std::string& path, const char* expected) const {
    if (!v.IsScalar()) fail_at(v.Mark(), path, ": expected ", expected, ", got ", kind_name(v));
    return v.Scalar();
  }

  int64_t non_negative_integer(const YAML::Node& v, const std::string& path) const {
    const std::string s = scalar(v, path, "a non-negative integer");
    int64_t out = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || out < 0)
      fail_at(v.Mark(), path, ": expected a non-negative integer, got '", s, "'");
    return out;
  }

  double number(const YAML::Node& v, const std::string& path) const {
    const std::string s = scalar(v, path, "a number");
    double out = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(out))
      fail_at(v.Mark(), path, ": expected a number, got '", s, "'");
    return out;
  }

  std::string name(const YAML::Node& v, const std::string& path) const {
    const std::string s = scalar(v, path, "a name");
    if (s.empty()) fail_at(v.Mark(), path, ": expected a name, got an empty string");
    return s;
  }

  // Calls visit(item, path) for every element of a list.
  void for_each_item(const YAML::Node& list, const std::string& path,
                     const std::function<void(const YAML::Node&, const std::string&)>& visit) const {
    if (!list.IsSequence()) fail_at(list.Mark(), path, " must be a list, got ", kind_name(list));
    for (size_t i = 0; i < list.size(); ++i) visit(list[i], path + "[" + std::to_string(i) + "]");
  }

  std::vector<std::string> names(const YAML::Node& list, const std::string& path) const {
    std::vector<std::string> out;
    for_each_item(list, path, [&](const YAML::Node& item, const std::string& p) { out.push_back(name(item, p)); });
    return out;
  }

  bool boolean(const YAML::Node& v, const std::string& path) const {
    const std::string s = scalar(v, path, "true or false");
    if (s == "true") return true;
    if (s == "false") return false;
    fail_at(v.Mark(), path, ": expected true or false, got '", s, "'");
  }

  // "FILE:LINE:COLUMN" of a node, as fail_at prefixes messages.
  std::string where(const YAML::Mark& mark) const {
    if (mark.is_null()) return name_;
    return name_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  }

  static const char* kind_name(const YAML::Node& v) {
    switch (v.Type()) {
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Scalar: return "a scalar";
      case YAML::NodeType::Null: return "nothing";
      default: return "an undefined value";
    }
  }

 private:
  std::string name_;
};

// `quantize:` (docs/quantization.md "## Options"): W8A8 on, calibration settings, per-node
// overrides. A relative `calib` directory is taken as written (relative to the working
// directory, like --calib).
CalibrationMethod read_method(const ConfigReader& r, const YAML::Node& v, const std::string& path) {
  const std::string s = r.scalar(v, path, "a calibration method");
  const auto m = parse_calibration_method(s);
  if (!m) r.fail_at(v.Mark(), path, ": expected minmax, ema, percentile, entropy or mse, got '", s, "'");
  return *m;
}

WeightGranularity read_granularity(const ConfigReader& r, const YAML::Node& v, const std::string& path) {
  const std::string s = r.scalar(v, path, "per_channel or per_tensor (weight scales)");
  if (s == "per_channel") return WeightGranularity::kPerChannel;
  if (s == "per_tensor") return WeightGranularity::kPerTensor;
  r.fail_at(v.Mark(), path, ": expected per_channel or per_tensor, got '", s, "'");
}

void read_quantize(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  if (v.IsNull()) return;
  QuantizeOptions& q = o.quant;
  const std::vector<std::string> known = {"scheme", "calib", "method", "ema_alpha", "percentile",
                                          "symmetric_activations", "granularity", "fallback_sqnr_db", "nodes"};
  r.for_each_entry(v, path, known, [&](const std::string& key, const YAML::Node& value, const std::string& full) {
    if (key == "scheme") {
      const std::string s = r.scalar(value, full, "w8a8 or none");
      if (s != "w8a8" && s != "none") r.fail_at(value.Mark(), full, ": expected w8a8 or none, got '", s, "'");
      o.quantize = s == "w8a8";
    } else if (key == "calib") {
      q.calib_dir = r.name(value, full);
    } else if (key == "method") {
      q.method = read_method(r, value, full);
    } else if (key == "ema_alpha") {
      q.ema_alpha = r.number(value, full);
      if (!(q.ema_alpha > 0 && q.ema_alpha <= 1)) r.fail_at(value.Mark(), full, ": must be in (0, 1], got ", q.ema_alpha);
    } else if (key == "percentile") {
      q.percentile = r.number(value, full);
      if (!(q.percentile > 0 && q.percentile <= 100))
        r.fail_at(value.Mark(), full, ": must be in (0, 100], got ", q.percentile);
    } else if (key == "symmetric_activations") {
      q.symmetric_activations = r.boolean(value, full);
    } else if (key == "granularity") {
      q.granularity = read_granularity(r, value, full);
    } else if (key == "fallback_sqnr_db") {
      q.fallback_sqnr_db = r.number(value, full);
    } else if (key == "nodes") {
      r.for_each_item(value, full, [&](const YAML::Node& item, const std::string& ip) {
        QuantNodeOverride ov;
        r.for_each_entry(item, ip, {"name", "exclude", "method", "granularity"},
                         [&](const std::string& k, const YAML::Node& val, const std::string& kp) {
                           if (k == "name") ov.name = r.name(val, kp);
                           if (k == "exclude") ov.exclude = r.boolean(val, kp);
                           if (k == "method") ov.method = read_method(r, val, kp);
                           if (k == "granularity") ov.granularity = read_granularity(r, val, kp);
                         });
        if (ov.name.empty()) r.fail_at(item.Mark(), ip, ": a node override needs 'name' (the ONNX node name)");
        q.nodes.push_back(ov);
      });
    }
  });
}

// One row per top-level key: the reader, the error listing known keys and docs/config.md.
struct TopLevelKey {
  const char* key;
  void (*read)(const ConfigReader&, const YAML::Node&, const std::string& path, CompileOptions&);
};

void read_version(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions&) {
  const int64_t version = r.non_negative_integer(v, path);
  if (version != 1)
    r.fail_at(v.Mark(), path, ": this cuvilc reads config version 1, the file says ", version);
}

void read_dims(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  if (v.IsNull()) return;
  r.for_each_entry(v, path, {}, [&](const std::string& name, const YAML::Node& spec, const std::string& full) {
    const std::string text = r.scalar(spec, full, "N, lo:hi or lo:");
    auto range = sym::parse_range(text);
    if (!range)
      r.fail_at(spec.Mark(), full, ": expected N, lo:hi or lo: (non-negative integers, lo <= hi), got '",
                text, "'");
    set_dim(o, name, *range);
  });
}

// freeze: {input: value | file.npy}. The value is checked against the model's input when the
// model is read (cli/cuvilc_freeze.cpp); a relative .npy path is taken as written (relative to
// the working directory, like --freeze and quantize.calib).
void read_freeze(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  if (v.IsNull()) return;
  r.for_each_entry(v, path, {}, [&](const std::string& name, const YAML::Node& value, const std::string& full) {
    const std::string text = r.scalar(value, full, "a number, true, false or a .npy file");
    if (text.empty()) r.fail_at(value.Mark(), full, ": expected a number, true, false or a .npy file, got ''");
    set_freeze(o, FreezeSpec{name, text, r.where(value.Mark()) + ": " + full});
  });
}

// buckets: auto | {name: pow2 | [b1, b2, ...] | "b1,b2"}
void read_buckets(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  if (v.IsNull()) return;
  if (v.IsScalar()) {
    const std::string text = r.scalar(v, path, "auto or a map of symbol: bounds");
    if (text != "auto") r.fail_at(v.Mark(), path, ": expected auto or a map of symbol: bounds, got '", text, "'");
    o.buckets.clear();
    return;
  }
  r.for_each_entry(v, path, {}, [&](const std::string& name, const YAML::Node& spec, const std::string& full) {
    std::string text = name + "=";
    if (spec.IsSequence()) {
      bool first = true;
      r.for_each_item(spec, full, [&](const YAML::Node& item, const std::string& ipath) {
        text += (first ? "" : ",") + r.scalar(item, ipath, "a non-negative integer");
        first = false;
      });
    } else {
      text += r.scalar(spec, full, "pow2 or a list of upper bounds");
    }
    std::string error;
    if (!parse_bucket_option(text, &o.buckets, &error)) r.fail_at(spec.Mark(), full, ": ", error);
  });
}

void read_fusion(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  o.fusion = r.boolean(v, path);
}

void read_layout(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  const std::string s = r.scalar(v, path, "auto, nchw or nhwc");
  const auto choice = parse_layout_choice(s);
  if (!choice) r.fail_at(v.Mark(), path, ": expected auto, nchw or nhwc, got '", s, "'");
  o.layout = *choice;
}

void read_kv_cache(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  const std::string s = r.scalar(v, path, "auto, on or off");
  const auto mode = parse_kv_cache_mode(s);
  if (!mode) r.fail_at(v.Mark(), path, ": expected auto, on or off, got '", s, "'");
  o.kv_cache = *mode;
}

void read_limits(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  if (v.IsNull()) return;
  std::vector<std::string> known;
  for (size_t i = 0; i < static_cast<size_t>(LimitId::kCount); ++i)
    known.push_back(limit_info(static_cast<LimitId>(i)).yaml_key);
  r.for_each_entry(v, path, known, [&](const std::string& key, const YAML::Node& value, const std::string& full) {
    for (size_t i = 0; i < static_cast<size_t>(LimitId::kCount); ++i) {
      const auto id = static_cast<LimitId>(i);
      if (key == limit_info(id).yaml_key) limit_value(o.limits, id) = r.non_negative_integer(value, full);
    }
  });
}

PatternNode read_pattern_node(const ConfigReader& r, const YAML::Node& v, const std::string& path) {
  PatternNode n;
  bool has_op = false, has_output = false;
  r.for_each_entry(v, path, {"op", "inputs", "output", "reduce_last_axis"},
                   [&](const std::string& key, const YAML::Node& value, const std::string& full) {
                     if (key == "op") {
                       // "cuvil::FusedMatMul" matches one of cuvil's fused ops (ir/fused_ops.h),
                       // as a rewrite's op names one.
                       const std::string name = r.name(value, full);
                       const size_t sep = name.find("::");
                       n.domain = sep == std::string::npos ? "" : name.substr(0, sep);
                       n.op = sep == std::string::npos ? name : name.substr(sep + 2);
                       has_op = true;
                       if (!op_from_name(n.domain, n.op)) r.fail_at(value.Mark(), full, ": unknown op '", name, "'");
                     } else if (key == "inputs") {
                       n.inputs = r.names(value, full);
                     } else if (key == "output") {
                       n.output = r.name(value, full);
                       has_output = true;
                     } else {
                       n.reduce_last_axis = r.boolean(value, full);
                     }
                   });
  if (!has_op) r.fail_at(v.Mark(), path, ": a match node needs 'op'");
  if (!has_output) r.fail_at(v.Mark(), path, ": a match node needs 'output' (the variable its result binds)");
  return n;
}

PatternConstant read_pattern_constant(const ConfigReader& r, const YAML::Node& v, const std::string& path) {
  PatternConstant c;
  c.tolerance = 1e-6;
  if (v.IsScalar() && v.Scalar() == "any") {
    c.any_value = true;
    c.tolerance = 0;
    return c;
  }
  if (v.IsScalar()) {
    c.value = r.number(v, path);
    return c;
  }
  bool has_value = false;
  r.for_each_entry(v, path, {"value", "tolerance"}, [&](const std::string& key, const YAML::Node& value, const std::string& full) {
    if (key == "value") {
      c.value = r.number(value, full);
      has_value = true;
    } else {
      c.tolerance = r.number(value, full);
      if (c.tolerance < 0) r.fail_at(value.Mark(), full, ": a tolerance cannot be negative");
    }
  });
  if (!has_value) r.fail_at(v.Mark(), path, ": expected a number, 'any' or {value: N, tolerance: T}");
  return c;
}

PatternAttr read_rewrite_attr(const ConfigReader& r, const std::string& key, const YAML::Node& v, const std::string& path) {
  PatternAttr a;
  a.name = key;
  if (v.IsMap()) {
    r.for_each_entry(v, path, {"constant"}, [&](const std::string&, const YAML::Node& value, const std::string& full) {
      a.kind = PatternAttr::Kind::FloatOfConstant;
      a.s = r.name(value, full);
    });
    if (a.kind != PatternAttr::Kind::FloatOfConstant) r.fail_at(v.Mark(), path, ": expected {constant: VARIABLE}");
    return a;
  }
  const std::string s = r.scalar(v, path, "an integer, a number, a string or {constant: VARIABLE}");
  int64_t i = 0;
  double f = 0;
  if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), i); !s.empty() && ec == std::errc() && end == s.data() + s.size()) {
    a.kind = PatternAttr::Kind::Int;
    a.i = i;
  } else if (auto [end2, ec2] = std::from_chars(s.data(), s.data() + s.size(), f);
             !s.empty() && ec2 == std::errc() && end2 == s.data() + s.size()) {
    a.kind = PatternAttr::Kind::Float;
    a.f = f;
  } else {
    a.kind = PatternAttr::Kind::String;
    a.s = s;
  }
  return a;
}

void read_rewrite(const ConfigReader& r, const YAML::Node& v, const std::string& path, Pattern& p) {
  bool has_op = false;
  r.for_each_entry(v, path, {"op", "opset", "inputs", "attributes"},
                   [&](const std::string& key, const YAML::Node& value, const std::string& full) {
                     if (key == "op") {
                       // "cuvil::SiLU" names one of cuvil's fused ops (ir/fused_ops.h).
                       const std::string name = r.name(value, full);
                       const size_t sep = name.find("::");
                       p.rewrite_domain = sep == std::string::npos ? "" : name.substr(0, sep);
                       p.rewrite_op = sep == std::string::npos ? name : name.substr(sep + 2);
                       has_op = true;
                       if (!op_from_name(p.rewrite_domain, p.rewrite_op)) r.fail_at(value.Mark(), full, ": unknown op '", name, "'");
                     } else if (key == "opset") {
                       p.rewrite_opset = static_cast<int>(std::min<int64_t>(r.non_negative_integer(value, full), 1000));
                     } else if (key == "inputs") {
                       r.for_each_item(value, full, [&](const YAML::Node& item, const std::string& ip) {
                         // '_' leaves an optional input out, as in the IR text.
                         const std::string in = r.name(item, ip);
                         p.rewrite_inputs.push_back(in == "_" ? "" : in);
                       });
                     } else {
                       r.for_each_entry(value, full, {}, [&](const std::string& k, const YAML::Node& av, const std::string& ap) {
                         p.rewrite_attrs.push_back(read_rewrite_attr(r, k, av, ap));
                       });
                     }
                   });
  if (!has_op) r.fail_at(v.Mark(), path, ": a rewrite needs 'op'");
  if (p.rewrite_opset == 0 && p.rewrite_domain.empty()) r.fail_at(v.Mark(), path, ": a rewrite needs 'opset' (the ONNX opset the new node follows)");
}

void read_patterns(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  if (v.IsNull()) return;
  r.for_each_item(v, path, [&](const YAML::Node& item, const std::string& ppath) {
    Pattern p;
    bool has_action = false, has_rewrite = false;
    YAML::Mark rewrite_mark;
    r.for_each_entry(item, ppath, {"name", "action", "match", "constants", "root", "rewrite"},
                     [&](const std::string& key, const YAML::Node& value, const std::string& full) {
                       if (key == "name") {
                         p.name = r.name(value, full);
                       } else if (key == "action") {
                         const std::string a = r.scalar(value, full, "fuse, rewrite or keep");
                         has_action = true;
                         if (a == "fuse") p.action = Pattern::Action::Fuse;
                         else if (a == "rewrite") p.action = Pattern::Action::Rewrite;
                         else if (a == "keep") p.action = Pattern::Action::Keep;
                         else r.fail_at(value.Mark(), full, ": expected fuse, rewrite or keep, got '", a, "'");
                       } else if (key == "match") {
                         r.for_each_item(value, full, [&](const YAML::Node& n, const std::string& np) {
                           p.nodes.push_back(read_pattern_node(r, n, np));
                         });
                       } else if (key == "constants") {
                         r.for_each_entry(value, full, {}, [&](const std::string& var, const YAML::Node& c, const std::string& cp) {
                           p.constants[var] = read_pattern_constant(r, c, cp);
                         });
                       } else if (key == "root") {
                         p.root = r.name(value, full);
                       } else {
                         has_rewrite = true;
                         rewrite_mark = value.Mark();
                         read_rewrite(r, value, full, p);
                       }
                     });
    if (p.name.empty()) r.fail_at(item.Mark(), ppath, ": a pattern needs a 'name'");
    if (!has_action) r.fail_at(item.Mark(), ppath, ": pattern '", p.name, "' needs an 'action' (fuse, rewrite or keep)");
    if (p.nodes.empty()) r.fail_at(item.Mark(), ppath, ": pattern '", p.name, "' needs a non-empty 'match' list");
    if (p.root.empty()) p.root = p.nodes.back().output;
    if (p.action == Pattern::Action::Rewrite && !has_rewrite)
      r.fail_at(item.Mark(), ppath, ": pattern '", p.name, "' has action rewrite but no 'rewrite'");
    if (p.action != Pattern::Action::Rewrite && has_rewrite)
      r.fail_at(rewrite_mark, ppath, ": pattern '", p.name, "' has a 'rewrite' but its action is not rewrite");
    for (const Pattern& other : o.patterns)
      if (other.name == p.name) r.fail_at(item.Mark(), ppath, ": a second pattern named '", p.name, "'");
    if (const std::string problem = check_pattern(p); !problem.empty()) r.fail_at(item.Mark(), ppath, ": ", problem);
    o.patterns.push_back(std::move(p));
  });
}

constexpr TopLevelKey kTopLevelKeys[] = {
    {"version", read_version},
    {"buckets", read_buckets},
    {"dims", read_dims},
    {"freeze", read_freeze},
    {"fusion", read_fusion},
    {"kv_cache", read_kv_cache},
    {"layout", read_layout},
    {"limits", read_limits},
    {"patterns", read_patterns},
    {"quantize", read_quantize},
};

}  // namespace

bool parse_bucket_option(const std::string& text, std::vector<BucketSpec>* out, std::string* error) {
  if (text == "auto") {
    out->clear();
    return true;
  }
  const size_t eq = text.find('=');
  BucketSpec spec;
  spec.symbol = text.substr(0, eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || spec.symbol.empty()) {
    *error = "expected auto, name=pow2 or name=b1,b2,... (inclusive upper bounds), got '" + text + "'";
    return false;
  }
  const std::string rest = text.substr(eq + 1);
  if (rest == "pow2") {
    spec.pow2 = true;
  } else {
    size_t pos = 0;
    while (pos <= rest.size()) {
      const size_t comma = std::min(rest.find(',', pos), rest.size());
      const std::string item = rest.substr(pos, comma - pos);
      int64_t v = -1;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 0) {
        *error = "bucket bound '" + item + "' of '" + spec.symbol + "' is not a non-negative integer (in '" +
                 text + "')";
        return false;
      }
      if (!spec.bounds.empty() && v <= spec.bounds.back()) {
        *error = "bucket bounds of '" + spec.symbol + "' must increase: " + std::to_string(v) + " after " +
                 std::to_string(spec.bounds.back()) + " (in '" + text + "')";
        return false;
      }
      spec.bounds.push_back(v);
      pos = comma + 1;
    }
  }
  for (BucketSpec& s : *out)
    if (s.symbol == spec.symbol) {
      s = spec;  // a later spec for the same symbol wins, as for dims
      return true;
    }
  out->push_back(spec);
  return true;
}

void set_freeze(CompileOptions& options, FreezeSpec spec) {
  for (FreezeSpec& f : options.freeze)
    if (f.input == spec.input) {
      f = std::move(spec);
      return;
    }
  options.freeze.push_back(std::move(spec));
}

void set_dim(CompileOptions& options, const std::string& name, sym::Range range) {
  for (auto& [n, r] : options.dims)
    if (n == name) {
      r = range;
      return;
    }
  options.dims.emplace_back(name, range);
}

CompileOptions parse_config(std::string_view text, const std::string& display_name) {
  ConfigReader reader(display_name);
  if (text.size() > kMaxConfigBytes)
    fail(ExitCode::kUsage, display_name, ": config is ", text.size(), " bytes, over the ", kMaxConfigBytes,
         "-byte limit for config files");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    reader.fail_at(e.mark, "not valid YAML: ", e.msg);
  } catch (const YAML::Exception& e) {  // e.g. nesting deeper than yaml-cpp's depth guard
    reader.fail_at(e.mark, "not valid YAML: ", e.msg);
  }
  CompileOptions options;
  if (root.IsNull()) return options;  // an empty file (or only comments) sets nothing
  std::vector<std::string> known;
  for (const auto& k : kTopLevelKeys) known.push_back(k.key);
  try {
    reader.for_each_entry(root, "", known, [&](const std::string& key, const YAML::Node& value, const std::string& path) {
      for (const auto& k : kTopLevelKeys)
        if (key == k.key) k.read(reader, value, path, options);
    });
  } catch (const YAML::Exception& e) {  // yaml-cpp refusing an operation on a malformed node
    reader.fail_at(e.mark, "invalid config: ", e.msg);
  }
  return options;
}

CompileOptions load_config_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ExitCode::kIo, "cannot read config '", path, "': ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    fail(ExitCode::kIo, "cannot read config '", path, "': not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigBytes) {
    close(fd);
    fail(ExitCode::kUsage, path, ": config is ", st.st_size, " bytes, over the ", kMaxConfigBytes,
         "-byte limit for config files");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = errno;
  close(fd);
  if (done != text.size()) fail(ExitCode::kIo, "cannot read config '", path, "': ", std::strerror(err));
  CompileOptions options = parse_config(text, path);
  options.config_path = path;
  return options;
}

}  // namespace cuvil
