// cuvil-run: run a compiled .cuvir package from the command line. Inputs come from .npy or
// ONNX TensorProto .pb files (--input name=path), or are random with a given shape
// (--shape name=1x128); outputs are summarised on the terminal and written as .npy files to
// --output-dir. --bench N times N runs and prints latency percentiles and runs per second,
// then the per-run overhead (setting inputs, binding shapes, dispatch) from N more runs.
// --trace writes a Trace Event JSON of the first run (the one whose outputs are printed; with
// --trace-run N, of run N after N - 1 untraced ones);
// --report a JSON summary (latency percentiles of the timed runs, arena, threads, kernel path).
// Uses only the public C API of libcuvil.
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <new>
#include <random>
#include <string>

#include "cli/cuvil_run_generate.h"
#include "cli/npy.h"
#include "cuvil.h"
#include "support/checked.h"
#include "support/error.h"
#include "support/file_identity.h"
#include "support/json_text.h"
#include "support/output_file.h"

namespace {

using cuvil::json_string;

// Exit codes match cuvilc (docs/cli.md).
constexpr int kExitUsage = 2, kExitInvalid = 3, kExitUnsupported = 4, kExitIo = 5, kExitRun = 6,
              kExitInternal = 70;

int status_exit(cuvil_status st) {
  switch (cuvil_status_code_of(st)) {
    case CUVIL_INVALID_ARGUMENT: case CUVIL_SHAPE: return kExitUsage;
    case CUVIL_INVALID_PACKAGE: return kExitInvalid;
    case CUVIL_UNSUPPORTED: return kExitUnsupported;
    case CUVIL_IO: return kExitIo;
    default: return kExitRun;
  }
}

int report(const char* what, cuvil_status st) {
  std::cerr << "cuvil-run: error: " << what << ": " << cuvil_status_message(st) << "\n";
  int rc = status_exit(st);
  cuvil_status_free(st);
  return rc;
}

bool parse_shape(const std::string& text, std::vector<int64_t>* dims) {
  dims->clear();
  if (text.empty() || text == "scalar") return true;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find_first_of("x,", i);
    std::string part = text.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (part.empty() || part.size() > 12 || part.find_first_not_of("0123456789") != std::string::npos) return false;
    dims->push_back(std::stoll(part));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return true;
}

// Fills `t` (dtype and dims set) with random values; "" or an error for a size that
// overflows or cannot be allocated.
std::string fill_random(cuvil::tools::HostTensor& t, std::mt19937_64& rng) {
  size_t esize = cuvil_dtype_size(t.dtype);
  if (esize == 0) return std::string("cannot make random values of dtype ") + cuvil_dtype_name(t.dtype);
  auto numel = cuvil::checked_numel(t.dims);
  auto bytes = numel ? cuvil::checked_mul(*numel, static_cast<int64_t>(esize)) : std::nullopt;
  if (!bytes) return "shape is too large (its byte size overflows)";
  const size_t n = static_cast<size_t>(*numel);
  try {
    t.bytes.assign(static_cast<size_t>(*bytes), 0);
  } catch (const std::bad_alloc&) {
    return "cannot allocate " + std::to_string(*bytes) + " bytes for a random input";
  }
  std::uniform_real_distribution<float> uf(-1.f, 1.f);
  std::uniform_int_distribution<int> ui(0, 15);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = t.bytes.data() + i * esize;
    switch (t.dtype) {
      case 1: { float v = uf(rng); std::memcpy(p, &v, 4); break; }
      case 11: { double v = uf(rng); std::memcpy(p, &v, 8); break; }
      case 7: { int64_t v = ui(rng); std::memcpy(p, &v, 8); break; }
      case 6: { int32_t v = ui(rng); std::memcpy(p, &v, 4); break; }
      case 9: *p = static_cast<uint8_t>(ui(rng) & 1); break;
      default: *p = static_cast<uint8_t>(ui(rng)); break;
    }
  }
  return "";
}

double as_double(int32_t dtype, const uint8_t* p) {
  switch (dtype) {
    case 1: { float v; std::memcpy(&v, p, 4); return v; }
    case 11: { double v; std::memcpy(&v, p, 8); return v; }
    case 7: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case 6: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case 3: return static_cast<int8_t>(*p);
    case 2: case 9: return *p;
    default: return NAN;
  }
}

void summarize(const cuvil_tensor_info& info, const void* data, size_t bytes) {
  std::cout << info.name << ": " << cuvil_dtype_name(info.dtype) << info.shape;
  size_t esize = cuvil_dtype_size(info.dtype);
  size_t n = esize ? bytes / esize : 0;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (n == 0 || std::isnan(as_double(info.dtype, p))) {
    std::cout << "\n";
    if (n == 0) return;
  }
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  size_t argmax = 0;
  for (size_t i = 0; i < n; ++i) {
    double v = as_double(info.dtype, p + i * esize);
    if (v > mx) { mx = v; argmax = i; }
    mn = std::min(mn, v);
    sum += v;
  }
  std::cout << "  min " << mn << "  max " << mx << "  mean " << sum / static_cast<double>(n) << "\n  values:";
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) std::cout << " " << as_double(info.dtype, p + i * esize);
  if (n > 8) std::cout << " ...";
  std::cout << "\n";
  // One row of scores (e.g. [1, classes]): the predicted class.
  if (info.rank >= 1 && (info.rank == 1 || static_cast<size_t>(info.dims[info.rank - 1]) == n) && n > 1)
    std::cout << "  argmax: " << argmax << "\n";
}


std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", std::isfinite(v) ? v : 0.0);
  return buf;
}

// --report: one JSON object. `ms` holds the latencies of the timed runs, sorted.
int write_report(const std::string& path, const std::string& model_path, const cuvil_model* model,
                 const cuvil_session* session, const std::vector<double>& ms, int warmup, double runs_per_second,
                 const std::map<std::string, cuvil::tools::HostTensor>& host) {
  cuvil_session_metrics m{};
  if (cuvil_status st = cuvil_session_get_metrics(session, &m)) return report("--report", st);
  auto pct = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<size_t>(p * static_cast<double>(ms.size())))]; };
  double sum = 0;
  for (double v : ms) sum += v;
  std::string j = "{\n  \"model\": " + json_string(model_path) + ",\n";
  j += "  \"kernel_path\": " + json_string(cuvil_cpu_path()) + ",\n";
  j += "  \"threads\": " + std::to_string(m.threads) + ",\n";
  j += std::string("  \"device\": ") + (cuvil_session_device(session) == CUVIL_DEVICE_CUDA ? "\"cuda\"" : "\"cpu\"") +
       ",\n";
  j += "  \"device_note\": " + json_string(cuvil_session_device_note(session)) + ",\n";
  j += "  \"bucket\": " + std::to_string(m.bucket) + ",\n";  // the program the last run chose
  j += "  \"inputs\": {";
  bool first = true;
  for (const auto& [name, t] : host) {
    std::string dims;
    for (size_t k = 0; k < t.dims.size(); ++k) dims += (k ? ", " : "") + std::to_string(t.dims[k]);
    j += std::string(first ? "" : ", ") + json_string(name) + ": {\"dtype\": " + json_string(cuvil_dtype_name(t.dtype)) +
         ", \"shape\": [" + dims + "]}";
    first = false;
  }
  j += "},\n";
  j += "  \"outputs\": [";
  const size_t n_out = cuvil_model_output_count(model);
  for (size_t i = 0; i < n_out; ++i) {
    cuvil_tensor_info info;
    if (cuvil_status st = cuvil_model_output_info(model, i, &info)) return report("--report", st);
    j += std::string(i ? ", " : "") + json_string(info.name);
  }
  j += "],\n";
  j += "  \"timed_runs\": " + std::to_string(ms.size()) + ",\n";
  j += "  \"warmup_runs\": " + std::to_string(warmup) + ",\n";
  j += "  \"latency_ms\": {\"min\": " + json_number(ms.front()) + ", \"p50\": " + json_number(pct(0.5)) +
       ", \"p90\": " + json_number(pct(0.9)) + ", \"p99\": " + json_number(pct(0.99)) +
       ", \"max\": " + json_number(ms.back()) + ", \"mean\": " + json_number(sum / static_cast<double>(ms.size())) +
       "},\n";
  j += "  \"runs_per_second\": " + json_number(runs_per_second) + ",\n";
  j += "  \"arena_bytes\": " + std::to_string(m.arena_bytes) + ",\n";
  j += "  \"arena_peak_bytes\": " + std::to_string(m.arena_peak_bytes) + ",\n";
  j += "  \"session_runs\": " + std::to_string(m.runs) + ",\n";
  j += "  \"session_failures\": " + std::to_string(m.failures) + "\n}\n";
  try {
    cuvil::write_file_atomically(path, j);
  } catch (const cuvil::Diagnostic& d) {
    std::cerr << "cuvil-run: error: --report: " << d.what() << "\n";
    return kExitIo;
  }
  return 0;
}

int run_main(int argc, char** argv) {
  CLI::App app{"cuvil-run: run a compiled cuvil package (.cuvir) on the CPU.\n"
               "Exit codes: 0 success, 2 bad input/shape, 3 invalid package, 4 unsupported (--device cuda\n"
               "without a usable GPU), 5 I/O, 6 run failed\n"
               "(also: deadline passed, a worker thread could not start)."};
  std::string model_path, output_dir, trace_path, report_path;
  std::vector<std::string> inputs, shapes;
  int threads = 0, bench = 0, warmup = 3, generate = 0, trace_run = 1;
  uint64_t seed = 1;
  int64_t deadline_ms = 0;
  std::string device = "auto";
  app.add_option("model", model_path, "Compiled package (.cuvir)")->required();
  app.add_option("--input", inputs, "name=path: input from a .npy or ONNX TensorProto .pb file (repeatable)");
  app.add_option("--shape", shapes, "name=1x128: random input of this shape for an input not given by --input "
                                    "(floats in [-1, 1), integers in [0, 16)). Inputs with a fully static shape "
                                    "need neither option.");
  app.add_option("--output-dir", output_dir, "Write each output as <dir>/<name>.npy (atomically; refused when that "
                                             "names the package or an --input file)");
  app.add_option("--threads", threads, "Worker threads, the calling one included: 0 = all cores, at most " +
                                         std::to_string(CUVIL_MAX_THREADS))
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", device,
                 "cpu, cuda or auto (default): cuda needs the NVIDIA driver, a device of sm_80 or newer and a "
                 "package with PTX, and exits 4 with the reason when CUDA cannot be used; auto runs on the CPU then. "
                 "Sessions run every package on the CPU in this version; the megakernel reaches a GPU only "
                 "through scripts/gpu_check.sh (docs/ptx.md).")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--bench", bench, "Time N runs; print p50/p90/p99 latency and runs per second, then the per-run overhead (set inputs, bind shapes, dispatch) of N more runs")->check(CLI::NonNegativeNumber);
  app.add_option("--generate", generate,
                 "Greedy decoding with a package that keeps a KV cache (docs/kv_cache.md): prefill --input "
                 "input_ids=prompt.npy, then generate N tokens one at a time; attention_mask and position_ids are "
                 "filled. Prints 'tokens: ...' and 'decode: N tokens, X tokens/s, first token Y ms'")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", warmup, "Untimed runs before --bench (default 3)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "Seed for random inputs (default 1)");
  app.add_option("--deadline-ms", deadline_ms,
                 "Stop a run that takes longer than this (0 = none); checked between instructions and "
                 "between chunks of a kernel's work (exit 6)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* trace_opt = app.add_option(
      "--trace", trace_path,
      "Write a Trace Event JSON of the first run (open it in ui.perfetto.dev or chrome://tracing): "
      "one track per thread, one slice per kernel call named after its ONNX node");
  app.add_option("--trace-run", trace_run,
                 "Trace run N instead of the first (default 1): runs 1..N-1 go first, untraced, so that N >= 2 shows "
                 "a warm run (caches, page faults and first-use packing behind it); its outputs are the ones printed. "
                 "A package with session state (a KV cache) advances it on every run")
      ->check(CLI::PositiveNumber)
      ->needs(trace_opt);
  app.add_option("--report", report_path,
                 "Write a JSON run report: latency percentiles over the --bench runs (or the one run), arena bytes, "
                 "threads, kernel path, shape bucket");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (threads > CUVIL_MAX_THREADS) {
    std::cerr << "cuvil-run: error: --threads " << threads << " is above the maximum of " << CUVIL_MAX_THREADS
              << " threads (CUVIL_MAX_THREADS)\n";
    return kExitUsage;
  }

  // Every file this run reads, so that no output is written over one (support/file_identity.h).
  cuvil::InputFileLog reads;
  reads.add_path(model_path, "the package '" + model_path + "'");
  cuvil_model* model = nullptr;
  if (cuvil_status st = cuvil_model_load_file(model_path.c_str(), &model)) return report(model_path.c_str(), st);
  cuvil_session_options opts;
  cuvil_session_options_init(&opts);
  opts.threads = threads;
  opts.deadline_ms = deadline_ms;
  opts.device = device == "cuda" ? CUVIL_DEVICE_CUDA : device == "cpu" ? CUVIL_DEVICE_CPU : CUVIL_DEVICE_AUTO;
  cuvil_session* session = nullptr;
  if (cuvil_status st = cuvil_session_create(model, &opts, &session)) {
    cuvil_model_release(model);
    return report("creating a session", st);
  }
  int rc = 0;
  std::map<std::string, cuvil::tools::HostTensor> host;
  std::mt19937_64 rng(seed);
  auto fail = [&](const std::string& msg, int code) {
    std::cerr << "cuvil-run: error: " << msg << "\n";
    rc = code;
  };
  std::map<std::string, std::string> input_files, input_shapes;
  for (const auto& spec : inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      fail("--input '" + spec + "': expected name=path", kExitUsage);
      break;
    }
    if (!input_files.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second) {
      fail("--input '" + spec.substr(0, eq) + "' given twice", kExitUsage);
      break;
    }
  }
  for (const auto& spec : shapes) {
    auto eq = spec.find('=');
    if (rc) break;
    if (eq == std::string::npos || eq == 0) { fail("--shape '" + spec + "': expected name=1x128", kExitUsage); break; }
    const std::string name = spec.substr(0, eq);
    if (!input_shapes.emplace(name, spec.substr(eq + 1)).second) {
      fail("--shape '" + name + "' given twice", kExitUsage);
      break;
    }
    if (input_files.count(name)) {
      fail("input '" + name + "' is given by both --input and --shape", kExitUsage);
      break;
    }
  }
  size_t n_in = cuvil_model_input_count(model);
  // Names that are not inputs first: a typo should not surface as "input missing".
  std::map<std::string, bool> known;
  for (size_t i = 0; i < n_in && !rc; ++i) {
    cuvil_tensor_info info;
    if (cuvil_status st = cuvil_model_input_info(model, i, &info)) { rc = report("input info", st); break; }
    known[info.name] = true;
  }
  auto known_names = [&] {
    std::string names;
    for (const auto& [name, unused] : known) names += (names.empty() ? "'" : ", '") + name + "'";
    return names.empty() ? std::string("none") : names;
  };
  for (const auto& [name, path] : input_files)
    if (!rc && !known.count(name)) fail("--input names unknown input '" + name + "' (inputs: " + known_names() + ")", kExitUsage);
  for (const auto& [name, s] : input_shapes)
    if (!rc && !known.count(name)) fail("--shape names unknown input '" + name + "' (inputs: " + known_names() + ")", kExitUsage);
  // State inputs (a KV cache the session keeps) are bound by the session, not given.
  std::vector<bool> state_input(n_in, false);
  for (size_t i = 0; i < cuvil_model_state_count(model); ++i) {
    cuvil_state_info s;
    if (cuvil_status st = cuvil_model_state_info(model, i, &s)) { rc = report("state info", st); break; }
    state_input[s.input_index] = true;
  }
  for (size_t i = 0; i < n_in && !rc; ++i) {
    cuvil_tensor_info info;
    if (cuvil_status st = cuvil_model_input_info(model, i, &info)) { rc = report("input info", st); break; }
    if (state_input[i] && !input_files.count(info.name) && !input_shapes.count(info.name)) continue;
    // --generate fills what it needs; only the files given are read.
    if (generate > 0 && !input_files.count(info.name)) continue;
    cuvil::tools::HostTensor t;
    auto f = input_files.find(info.name);
    if (f != input_files.end()) {
      const std::string& path = f->second;
      // A file that cannot be opened is an I/O error (exit 5); a malformed one is bad input.
      struct stat sb;
      if (stat(path.c_str(), &sb) != 0) {
        fail(path + ": cannot open (--input " + info.name + "): " + std::strerror(errno), kExitIo);
        break;
      }
      if (!S_ISREG(sb.st_mode)) {
        fail(path + ": not a regular file (--input " + info.name + ")", kExitIo);
        break;
      }
      reads.add({sb.st_dev, sb.st_ino}, "--input " + std::string(info.name) + " ('" + path + "')");
      std::string err = path.size() > 3 && path.substr(path.size() - 3) == ".pb"
                            ? cuvil::tools::read_tensor_pb(path, &t)
                            : cuvil::tools::read_npy(path, &t);
      if (!err.empty()) { fail(err, kExitUsage); break; }
    } else {
      t.dtype = info.dtype;
      auto s = input_shapes.find(info.name);
      if (s != input_shapes.end()) {
        if (!parse_shape(s->second, &t.dims)) { fail(std::string("--shape ") + info.name + "=" + s->second + ": bad shape", kExitUsage); break; }
        // Check what the model states before allocating random data for the shape.
        if (static_cast<int32_t>(t.dims.size()) != info.rank) {
          fail(std::string("--shape ") + info.name + "=" + s->second + ": rank " + std::to_string(t.dims.size()) +
               ", but input '" + info.name + "' has shape " + info.shape + " (rank " + std::to_string(info.rank) + ")",
               kExitUsage);
          break;
        }
        for (int k = 0; k < info.rank && !rc; ++k)
          if (info.dims[k] >= 0 && t.dims[static_cast<size_t>(k)] != info.dims[k])
            fail(std::string("--shape ") + info.name + "=" + s->second + ": dim " + std::to_string(k) + " is " +
                 std::to_string(t.dims[static_cast<size_t>(k)]) + ", but input '" + info.name + "' has shape " +
                 info.shape, kExitUsage);
        if (rc) break;
      } else {
        for (int k = 0; k < info.rank; ++k) {
          if (info.dims[k] < 0) {
            fail(std::string("input '") + info.name + "' has shape " + info.shape +
                 "; give --input " + info.name + "=file.npy or --shape " + info.name + "=...", kExitUsage);
            break;
          }
          t.dims.push_back(info.dims[k]);
        }
        if (rc) break;
      }
      std::string err = fill_random(t, rng);
      if (!err.empty()) { fail(std::string("input '") + info.name + "': " + err, kExitUsage); break; }
    }
    host[info.name] = std::move(t);
  }
  if (!rc && generate > 0) {
    rc = cuvil::tools::run_generate(model, session, host, generate);
    cuvil_session_release(session);
    cuvil_model_release(model);
    return rc;
  }
  // --output-dir writes <dir>/<name>.npy for every output; refuse, before the run and before
  // anything is written, a path that names a file this run read (also through links).
  size_t n_out = cuvil_model_output_count(model);
  auto output_path = [&](const char* output_name) {
    std::string name = output_name;
    for (char& c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
    return output_dir + "/" + name + ".npy";
  };
  for (size_t i = 0; i < n_out && !rc && !output_dir.empty(); ++i) {
    cuvil_tensor_info info;
    if (cuvil_status st = cuvil_model_output_info(model, i, &info)) { rc = report("output info", st); break; }
    const std::string path = output_path(info.name);
    if (const cuvil::InputFile* in = reads.input_named_by(path))
      fail("--output-dir: output '" + std::string(info.name) + "' would be written to '" + path +
           "', which names the same file as " + in->description +
           " read by this run; choose another --output-dir (nothing was written)", kExitUsage);
  }
  for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"--trace", trace_path},
                                     std::pair<const char*, const std::string&>{"--report", report_path}}) {
    if (rc || path.empty()) continue;
    if (const cuvil::InputFile* in = reads.input_named_by(path))
      fail(std::string(option) + " '" + path + "' names the same file as " + in->description +
           " read by this run; choose another path (nothing was written)", kExitUsage);
  }
  if (!rc && !trace_path.empty() && !report_path.empty() && trace_path == report_path)
    fail("--trace and --report name the same file '" + trace_path + "'", kExitUsage);
  // Inputs are bound anew for every run: the runtime borrows them only until the run returns.
  auto bind_and_run = [&]() {
    for (auto& [name, t] : host)
      if (cuvil_status st = cuvil_session_set_input(session, name.c_str(), t.dtype, static_cast<int32_t>(t.dims.size()),
                                                    t.dims.data(), t.bytes.data(), t.bytes.size())) {
        rc = report(("input '" + name + "'").c_str(), st);
        return;
      }
    if (cuvil_status st = cuvil_session_run(session)) rc = report("run", st);
  };
  for (int i = 1; i < trace_run && !rc; ++i) bind_and_run();  // --trace-run N: N - 1 untraced runs first
  if (!rc && !trace_path.empty())
    if (cuvil_status st = cuvil_session_enable_trace(session, 1)) rc = report("trace", st);
  double first_run_ms = 0;
  if (!rc) {
    auto a = std::chrono::steady_clock::now();
    bind_and_run();
    first_run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
  }
  if (!trace_path.empty()) {
    // Written whether or not the run succeeded: the trace of a failed run shows where it stopped.
    cuvil_session_enable_trace(session, 0);
    if (cuvil_status st = cuvil_session_write_trace(session, trace_path.c_str())) {
      if (rc) {
        cuvil_status_free(st);
      } else {
        rc = report("--trace", st);
      }
    }
  }
  if (!rc && !output_dir.empty()) {
    struct stat sb;
    if (stat(output_dir.c_str(), &sb) != 0 && mkdir(output_dir.c_str(), 0755) != 0)
      fail("cannot create --output-dir '" + output_dir + "'", kExitIo);
  }
  for (size_t i = 0; i < n_out && !rc; ++i) {
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    if (cuvil_status st = cuvil_session_get_output(session, i, &info, &data, &bytes)) { rc = report("output", st); break; }
    summarize(info, data, bytes);
    if (!output_dir.empty()) {
      cuvil::tools::HostTensor t;
      t.dtype = info.dtype;
      t.dims.assign(info.dims, info.dims + info.rank);
      t.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
      std::string err = cuvil::tools::write_npy(output_path(info.name), t);
      if (!err.empty()) fail(err, kExitIo);
    }
  }
  std::vector<double> ms;  // latencies of the timed runs (--bench), for the report
  double runs_per_second = 0;
  if (!rc && bench > 0) {
    for (int i = 0; i < warmup && !rc; ++i) bind_and_run();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < bench && !rc; ++i) {
      auto a = std::chrono::steady_clock::now();
      bind_and_run();
      if (rc) break;
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    }
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    runs_per_second = total > 0 ? bench / total : 0;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    std::sort(ms.begin(), ms.end());
    if (!rc) {
      auto pct = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<size_t>(p * static_cast<double>(ms.size())))]; };
      std::printf("bench: %d runs, p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, %.1f runs/s\n", bench, pct(0.5), pct(0.9),
                  pct(0.99), bench / total);
    }
    // The per-run overhead, from a second set of as many runs with the runtime's statistics on
    // (they read the clock around every kernel call, so the latency above is measured without
    // them): setting the inputs (cuvil_session_set_input), binding shapes (symbols, shape
    // expressions, arena plan), dispatch (the run minus binding minus time inside kernels).
    if (!rc) {
      if (cuvil_status st = cuvil_session_enable_run_stats(session, 1)) rc = report("run stats", st);
      std::vector<double> set_us, bind_us, dispatch_us, kernel_us, run_us;
      cuvil_run_stats stats{};
      for (int i = 0; i < bench && !rc; ++i) {
        auto a = std::chrono::steady_clock::now();
        for (auto& [name, t] : host)
          if (cuvil_status st = cuvil_session_set_input(session, name.c_str(), t.dtype, static_cast<int32_t>(t.dims.size()),
                                                        t.dims.data(), t.bytes.data(), t.bytes.size())) {
            rc = report(("input '" + name + "'").c_str(), st);
            break;
          }
        if (rc) break;
        set_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
        if (cuvil_status st = cuvil_session_run(session)) { rc = report("run", st); break; }
        if (cuvil_status st = cuvil_session_get_run_stats(session, &stats)) { rc = report("run stats", st); break; }
        bind_us.push_back(stats.bind_ns / 1e3);
        dispatch_us.push_back(stats.dispatch_ns / 1e3);
        kernel_us.push_back(stats.kernel_ns / 1e3);
        run_us.push_back(stats.total_ns / 1e3);
      }
      cuvil_session_enable_run_stats(session, 0);
      if (!rc) {
        const double dispatch = median(dispatch_us);
        std::printf("overhead (median per run): set inputs %.2f us, bind shapes %.2f us, dispatch %.2f us over %lld "
                    "instructions (%lld kernel calls, %.0f ns per call), in kernels %.2f us, run %.2f us\n",
                    median(set_us), median(bind_us), dispatch, static_cast<long long>(stats.instructions),
                    static_cast<long long>(stats.kernel_calls),
                    stats.kernel_calls ? dispatch * 1e3 / static_cast<double>(stats.kernel_calls) : 0.0,
                    median(kernel_us), median(run_us));
      }
    }
  }
  if (!rc && !report_path.empty()) {
    if (ms.empty()) ms.push_back(first_run_ms);  // no --bench: the one run
    rc = write_report(report_path, model_path, model, session, ms, bench > 0 ? warmup : 0, runs_per_second, host);
  }
  cuvil_session_release(session);
  cuvil_model_release(model);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  // Nothing may escape as an abort: running out of memory is a failed run, anything else
  // is a cuvil bug.
  try {
    return run_main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cerr << "cuvil-run: error: out of memory\n";
    return kExitRun;
  } catch (const std::exception& e) {
    std::cerr << "cuvil-run: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}
