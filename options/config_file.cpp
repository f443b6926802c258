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

  bool boolean(const YAML::Node& v, const std::string& path) const {
    const std::string s = scalar(v, path, "true or false");
    if (s == "true") return true;
    if (s == "false") return false;
    fail_at(v.Mark(), path, ": expected true or false, got '", s, "'");
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

void read_fusion(const ConfigReader& r, const YAML::Node& v, const std::string& path, CompileOptions& o) {
  o.fusion = r.boolean(v, path);
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

constexpr TopLevelKey kTopLevelKeys[] = {
    {"version", read_version},
    {"dims", read_dims},
    {"fusion", read_fusion},
    {"limits", read_limits},
};

}  // namespace

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
  return parse_config(text, path);
}

}  // namespace cuvil
