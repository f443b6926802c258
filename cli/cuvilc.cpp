// cuvilc: the cuvil compiler driver. Subcommands: `inspect` (summary of an ONNX model),
// `compile` (run the pipeline; `--emit ir` prints the IR after shape inference; `--quantize
// w8a8` compiles the calibrated QDQ model) and `quantize` (write the calibrated QDQ model).
// Every failure is a diagnostic on stderr with a documented exit code (docs/cli.md).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <new>

#include <sys/mman.h>
#include <cerrno>
#include <cstring>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "codegen/ptx/megakernel_ptx.h"
#include "frontend/onnx_import.h"
#include "ir/printer.h"
#include "cli/cuvilc_freeze.h"
#include "cli/cuvilc_report.h"
#include "cli/progress.h"
#include "ir/verifier.h"
#include "options/compile_options.h"
#include "passes/infer_shapes.h"
#include "passes/pipeline.h"
#include "quant/quant_report.h"
#include "quant/quantize.h"
#include "runtime/disasm.h"
#include "runtime/expr_eval.h"
#include "runtime/package.h"
#include "support/error.h"
#include "support/file_identity.h"
#include "support/limits.h"
#include "support/output_file.h"

namespace cuvil {
namespace {

constexpr const char* kExitCodes =
    "Exit codes: 0 success, 2 usage error, 3 invalid model, 4 unsupported feature,\n"
    "5 I/O error, 70 internal error (a cuvil bug; please report it).";

constexpr const char* kDimHelp =
    "Range of a symbolic dimension: name=N (fixed), name=lo:hi or name=lo: (no upper bound). "
    "Names are the model's dim_params (e.g. batch, seq) or the generated <input>_dim<k> names "
    "that `cuvilc inspect` lists. Repeatable.";

constexpr const char* kFreezeHelp =
    "Fix a model input's value at compile time: name=VALUE (one number, or true/false, for an input "
    "of one element) or name=FILE.npy (dtype and shape as the input's). The input becomes a constant "
    "(Ifs on it fold to one branch) and leaves the package's inputs. Repeatable. Config key freeze.";

constexpr const char* kConfigHelp =
    "YAML config file with cuvilc's settings (dims, freeze, buckets, fusion, layout, limits, patterns, quantize; docs/config.md). Options "
    "given on the command line override the same keys.";

// The settings of one invocation: the config file first, then the command line over it.
struct CommandLineSettings {
  std::string config;
  std::vector<std::string> dims;
  std::vector<std::string> freeze;  // --freeze NAME=VALUE
  bool no_fusion = false;
  std::string layout;  // --layout, "" when not given
  std::string kv_cache;  // --kv-cache, "" when not given
  std::vector<std::string> buckets;  // --buckets
  CompileLimits limits;                                   // --max-... values
  std::vector<std::pair<LimitId, CLI::Option*>> limit_options;  // to see which were given
  // W8A8 (docs/quantization.md): each overrides the config's quantize.* only when given.
  std::string quantize, calib, method, quant_report;
  double ema_alpha = 0, percentile = 0, fallback_sqnr_db = 0;
  bool symmetric_activations = false;
  std::vector<CLI::Option*> quant_options;  // --ema-alpha, --percentile, --quant-fallback-sqnr, --symmetric-activations
};

// The W8A8 options `compile` and `quantize` share.
void add_quant_options(CLI::App* app, CommandLineSettings* s) {
  app->add_option("--calib", s->calib,
                  "Calibration data directory: <input>.npy per model input with a leading sample axis, "
                  "or sample folders DIR/<n>/<input>.npy (sorted). Config key quantize.calib")
      ->option_text("DIR");
  app->add_option("--calibration-method", s->method,
                  "How activation ranges are chosen: minmax (default), ema, percentile, entropy (KL, as "
                  "TensorRT), mse. Config key quantize.method")
      ->check(CLI::IsMember(calibration_method_names()));
  s->quant_options.push_back(app->add_option("--ema-alpha", s->ema_alpha,
                                             "ema: weight of each sample's min/max (default 0.01)")
                                 ->check(CLI::Range(1e-9, 1.0)));
  s->quant_options.push_back(app->add_option("--percentile", s->percentile,
                                             "percentile: the percentile of |x| kept (default 99.999)")
                                 ->check(CLI::Range(1e-9, 100.0)));
  s->quant_options.push_back(app->add_flag("--symmetric-activations", s->symmetric_activations,
                                           "Activations s8 with zero point 0 (default: u8 with a zero point)"));
  s->quant_options.push_back(app->add_option("--quant-fallback-sqnr", s->fallback_sqnr_db,
                                             "Keep layers whose SQNR over the calibration set is below this "
                                             "many dB in float32, each listed with its error (default 0: none)")
                                 ->option_text("DB"));
  app->add_option("--quant-report", s->quant_report,
                  "Write the per-layer error report as an SVG heatmap (layers x SQNR, cosine, rel L2)")
      ->option_text("FILE.svg");
}

// One option per row of support/limits.def (--max-nodes, ...). Only those given override the
// config's limits.<yaml_key> (or the default).
void add_limit_options(CLI::App* app, CommandLineSettings* settings) {
  for (size_t i = 0; i < static_cast<size_t>(LimitId::kCount); ++i) {
    const LimitId id = static_cast<LimitId>(i);
    const LimitInfo& info = limit_info(id);
    CLI::Option* opt = app->add_option(info.cli_flag, limit_value(settings->limits, id),
                                       std::string("Resource cap: ") + info.what + " (default " +
                                           std::to_string(info.default_value) + "; config key limits." +
                                           info.yaml_key + "; docs/security.md)")
                           ->check(CLI::NonNegativeNumber)
                           ->option_text("N");
    settings->limit_options.emplace_back(id, opt);
  }
}

CompileOptions resolve_options(const CommandLineSettings& cl) {
  CompileOptions o;
  if (!cl.config.empty()) o = load_config_file(cl.config);
  for (const auto& d : cl.dims) {
    auto [name, range] = frontend::parse_dim_option(d);
    set_dim(o, name, range);
  }
  for (const auto& f : cl.freeze) set_freeze(o, parse_freeze_option(f));
  if (cl.no_fusion) o.fusion = false;
  if (!cl.layout.empty()) o.layout = *parse_layout_choice(cl.layout);  // CLI::IsMember checked it
  if (!cl.kv_cache.empty()) o.kv_cache = *parse_kv_cache_mode(cl.kv_cache);  // CLI::IsMember checked it
  for (const std::string& b : cl.buckets) {
    std::string error;
    if (!parse_bucket_option(b, &o.buckets, &error)) fail(ExitCode::kUsage, "--buckets: ", error);
  }
  for (const auto& [id, opt] : cl.limit_options)
    if (opt->count() > 0) limit_value(o.limits, id) = limit_value(cl.limits, id);
  if (!cl.quantize.empty()) o.quantize = cl.quantize == "w8a8";
  if (!cl.calib.empty()) o.quant.calib_dir = cl.calib;
  if (!cl.method.empty()) o.quant.method = *parse_calibration_method(cl.method);  // IsMember checked it
  if (!cl.quant_options.empty()) {
    if (cl.quant_options[0]->count()) o.quant.ema_alpha = cl.ema_alpha;
    if (cl.quant_options[1]->count()) o.quant.percentile = cl.percentile;
    if (cl.quant_options[2]->count()) o.quant.symmetric_activations = cl.symmetric_activations;
    if (cl.quant_options[3]->count()) o.quant.fallback_sqnr_db = cl.fallback_sqnr_db;
  }
  return o;
}

frontend::ImportOptions import_options(const CompileOptions& options) {
  frontend::ImportOptions o;
  o.dims = options.dims;
  o.limits = options.limits;
  return o;
}

std::string model_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// Calibrates `path` and returns the QDQ model with its report (quant/quantize.h), showing
// progress on a terminal.
quant::QuantizeResult calibrate(const std::string& path, const CompileOptions& options, Progress* progress) {
  if (options.quant.calib_dir.empty())
    fail(ExitCode::kUsage, "quantizing needs calibration data: give --calib DIR (or quantize.calib in the config)");
  quant::QuantizeRequest req;
  req.options = options.quant;
  req.dims = options.dims;
  req.limits = options.limits;
  req.display_name = path;
  req.model_dir = model_dir(path);
  req.progress = [progress](const std::string& s) { progress->show("[quantize] " + s); };
  quant::QuantizeResult r = quant::quantize_model(quant::read_model_proto(path), req);
  progress->clear();
  return r;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What `compile` prints between passes and where it stops (--stop-after, --print-after-all).
struct PipelineFlags {
  std::string stop_after;
  std::vector<std::string> skip;
  bool print_after_all = false;
};

// `qdq_bytes`, when given, is the model to compile in place of the file (the quantized model).
Model load_and_infer(const std::string& path, const CompileOptions& options,
                     const PipelineFlags& flags = {}, CompileReport* report = nullptr,
                     Progress* progress = nullptr, const std::string* qdq_bytes = nullptr) {
  auto start = Clock::now();
  if (progress) progress->show("[1/4] importing " + path);
  Model m = qdq_bytes ? frontend::import_onnx_bytes(*qdq_bytes, model_dir(path), import_options(options), path)
                      : frontend::import_onnx_file(path, import_options(options));
  freeze_inputs(m, options.freeze);
  verify_model(m);
  if (report) {
    report->import_ms = ms_since(start);
    report->nodes_imported = count_nodes(*m.graph);
  }
  PipelineOptions po;
  po.stop_after = flags.stop_after;
  po.skip.insert(flags.skip.begin(), flags.skip.end());
  po.context.limits = options.limits;
  po.context.user_patterns = options.patterns;
  po.context.layout = options.layout;
  po.context.kv_cache = options.kv_cache;
  if (flags.print_after_all) {
    if (progress) progress->clear();
    po.after_pass = [](const PassRecord& r, const Model& model) {
      std::cerr << "// IR after pass " << r.name << " (nodes " << r.nodes_before << " -> " << r.nodes_after
                << ")\n"
                << model_to_string(model);
    };
  } else if (progress && progress->enabled()) {
    const size_t total = all_passes().size();
    po.after_pass = [progress, total, n = size_t{0}](const PassRecord& r, const Model&) mutable {
      progress->show("[2/4] passes: " + std::to_string(++n) + " of " + std::to_string(total) + " (" + r.name + ")");
    };
  }
  start = Clock::now();
  std::vector<PassRecord> records = run_passes(m, po);
  if (report) {
    report->passes_ms = ms_since(start);
    report->passes = std::move(records);
    report->nodes_after_passes = count_nodes(*m.graph);
  }
  return m;
}

std::string shape_line(const Value& v) { return value_ref(v.name).substr(1) + ": " + type_to_string(v); }

void count_ops(const Graph& g, std::map<std::string, int>& hist) {
  for (const Node& n : g.nodes) {
    hist[(n.domain.empty() ? "" : n.domain + "::") + n.op_type]++;
    for (const auto& [k, a] : n.attrs) {
      if (a.g) count_ops(*a.g, hist);
      for (const auto& sg : a.graphs) count_ops(*sg, hist);
    }
  }
}

bool is_package(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 8 && std::equal(magic, magic + 8, rt::kPackageMagic);
}

int inspect_package(const std::string& path, bool disasm) {
  std::shared_ptr<rt::LoadedPackage> pkg;
  rt::Status st = rt::LoadedPackage::open_file(path, &pkg);
  if (!st.is_ok()) fail(ExitCode::kInvalidModel, st.message());
  std::cout << "package: " << path << " (format " << pkg->format_major() << "." << pkg->format_minor()
            << ", " << pkg->size() << " bytes, verified)\n";
  std::cout << "sections:\n";
  for (const auto& sec : pkg->sections())
    std::cout << "  " << rt::section_kind_name(sec.kind) << " offset " << sec.offset << " size " << sec.size << "\n";
  std::cout << "manifest:\n";
  for (const auto& e : pkg->manifest().entries) std::cout << "  " << e.key << ": " << e.value << "\n";
  const std::string* total = pkg->manifest().find("intermediate_bytes");
  std::cout << "memory: sum of all intermediates " << (total ? *total : std::string("?")) << " bytes\n";
  // One program per shape bucket, in selection order: the first whose guard holds runs.
  const size_t n = pkg->programs().size();
  std::cout << "programs: " << n << " (the first whose guard holds runs)\n";
  for (size_t i = 0; i < n; ++i) {
    const rt::Program& p = pkg->programs()[i];
    std::cout << "  program " << i << ": guard " << rt::guard_to_string(pkg->guards()[i], p) << "; arena "
              << rt::expr_to_string(p, p.arena_size) << " bytes; " << p.tensors.size() << " tensors, "
              << p.nodes.size() << " op calls, " << p.kernels.size() << " tile kernels, " << p.loops.size()
              << " loops, " << p.code.size() << " code words\n";
  }
  if (!pkg->report().empty()) std::cout << "report:\n" << pkg->report();
  if (disasm)
    for (size_t i = 0; i < n; ++i) {
      if (n > 1) std::cout << "# program " << i << "\n";
      std::cout << rt::disassemble(pkg->programs()[i]);
    }
  return 0;
}

// Code-generation options from the compile options: fusion on or off, and the config's fuse
// and keep patterns matched against `m` (their match counts go to `matches`).
codegen::LowerOptions lower_options(const Model& m, const CompileOptions& options,
                                    std::vector<std::pair<std::string, int64_t>>* matches) {
  codegen::LowerOptions lo;
  lo.fuse_elementwise = options.fusion;
  for (const Pattern& p : options.patterns) {
    if (p.action == Pattern::Action::Rewrite) continue;
    const auto found = find_matches(m, p);
    if (matches) matches->emplace_back(p.name, static_cast<int64_t>(found.size()));
    for (const auto& names : found) {
      if (p.action == Pattern::Action::Keep) lo.keep_unfused.insert(names.begin(), names.end());
      else lo.fuse.push_back({p.name, names});
    }
  }
  return lo;
}

int run_inspect(const std::string& path, const CompileOptions& options, bool disasm) {
  if (is_package(path)) return inspect_package(path, disasm);
  Model m = load_and_infer(path, options);
  const Graph& g = *m.graph;
  std::cout << "model: " << path << "\n";
  std::cout << "ir_version: " << m.ir_version << "\n";
  std::cout << "producer: " << (m.producer_name.empty() ? "(none)" : m.producer_name + " " + m.producer_version) << "\n";
  std::cout << "opsets:";
  for (const auto& [d, v] : m.opset_imports) std::cout << " " << (d.empty() ? "ai.onnx" : d) << "=" << v;
  std::cout << "\n";
  if (!m.local_functions.empty()) {
    std::cout << "inlined functions:";
    for (const auto& f : m.local_functions) std::cout << " " << f;
    std::cout << "\n";
  }
  std::cout << "inputs:\n";
  for (ValueId id : g.inputs) std::cout << "  " << shape_line(g.value(id)) << "\n";
  std::cout << "outputs:\n";
  for (ValueId id : g.outputs) std::cout << "  " << shape_line(g.value(id)) << "\n";
  if (!m.ranges.all().empty()) {
    std::cout << "symbols:\n";
    for (const auto& [name, r] : m.ranges.all()) {
      std::cout << "  " << sym::DimExpr::symbol(name).to_string() << " in [" << r.lo << ", ";
      if (r.hi == sym::Range::kUnbounded) std::cout << "inf)\n";
      else std::cout << r.hi << "]\n";
    }
  }
  int64_t params = 0, param_bytes = 0;
  int initializers = 0;
  for (const Value& v : g.values)
    if (v.is_initializer) {
      ++initializers;
      params += v.data->numel();
      param_bytes += static_cast<int64_t>(v.data->bytes.size());
    }
  std::cout << "parameters: " << params << " in " << initializers << " initializers ("
            << param_bytes << " bytes)\n";
  std::map<std::string, int> hist;
  count_ops(g, hist);
  int total = 0;
  for (const auto& [op, n] : hist) total += n;
  std::cout << "nodes: " << total << "\n";
  std::cout << "ops:\n";
  for (const auto& [op, n] : hist) std::cout << "  " << op << " " << n << "\n";
  // Every value without a full shape, each with the node that made it and why.
  ShapeCoverage cov = shape_coverage(m, SIZE_MAX);
  std::cout << "shapes: " << cov.fully_known << "/" << cov.values << " values fully known\n";
  for (const auto& u : cov.unknown) std::cout << "  unknown: " << u << "\n";
  auto unsupported = frontend::find_unsupported(m);
  if (unsupported.empty()) {
    std::cout << "unsupported ops: none\n";
  } else {
    std::cout << "unsupported ops: " << unsupported.size() << "\n";
    for (const auto& u : unsupported)
      std::cout << "  " << (u.domain.empty() ? "" : u.domain + "::") << u.op_type << " (node '"
                << u.node_name << "' in graph '" << u.graph_name << "')\n";
    return 0;
  }
  // What code generation makes of it: the tile kernels with the nodes each fuses, and every
  // op call or kernel boundary with why (the compile report's not_fused).
  const codegen::LoweredModel lowered = codegen::lower_model(m, lower_options(m, options, nullptr));
  std::cout << "tile kernels: " << lowered.kernel_nodes.size() << "\n";
  for (const auto& nodes : lowered.kernel_nodes) {
    std::cout << " ";
    for (const std::string& n : nodes) std::cout << " '" << n << "'";
    std::cout << "\n";
  }
  std::cout << "op calls: " << lowered.call_ops << "\n";
  std::cout << "not fused: " << lowered.not_fused.size() << "\n";
  for (const auto& f : lowered.not_fused) std::cout << "  " << f.op << " '" << f.node << "': " << f.why << "\n";
  return 0;
}

std::string default_output(const std::string& model_path) {
  std::string base = model_path;
  if (auto slash = base.find_last_of('/'); slash != std::string::npos) base = base.substr(slash + 1);
  if (base.size() > 5 && base.substr(base.size() - 5) == ".onnx") base = base.substr(0, base.size() - 5);
  return base + ".cuvir";
}

std::string pass_help() {
  std::string s = "Stop after this pass and print the IR (implies --emit ir); 'import' stops "
                  "before the first pass. Passes, in order:";
  for (const PassInfo& p : all_passes()) s += std::string(" ") + p.name + " (" + p.what + ");";
  s.back() = '.';
  return s;
}

// An output path that names a file the compile reads (the model, an external data file; also
// through symlinks and hard links) would replace an input: a usage error, before anything is
// written. Checked before the compile for the model and again at the write, once the frontend
// has noted the external data files in `reads`.
void refuse_output_over_input(const std::string& output, const InputFileLog& reads) {
  if (const InputFile* in = reads.input_named_by(output))
    fail(ExitCode::kUsage, "output '", output, "' names the same file as ", in->description,
         ", which this compile reads; choose another -o path (nothing was written)");
}

void write_compile_output(const std::string& output, std::string_view data,
                          const InputFileLog& reads) {
  refuse_output_over_input(output, reads);
  write_file_atomically(output, data);
}

// The runtime's loader over the package just written (mapped from `fd`): a package that
// fails is a compiler bug, never something to ship.
void verify_written_package(int fd, uint64_t size) {
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) fail(ExitCode::kIo, "cannot map the written package to verify it: ", std::strerror(errno));
  std::shared_ptr<rt::LoadedPackage> check;
  rt::Status st = rt::LoadedPackage::open_memory(map, size, /*copy=*/false, &check);
  check.reset();
  munmap(map, size);
  CUVIL_ASSERT(st.is_ok(), "the package the compiler wrote fails verification: " << st.message());
}

int run_compile(const std::string& path, std::string emit, std::string output, const CompileOptions& options,
                const PipelineFlags& flags, const std::string& report_path, bool include_ptx,
                const std::string& quant_svg = "") {
  const auto start = Clock::now();
  if (!flags.stop_after.empty()) {
    if (emit == "bytecode" || emit == "ptx")
      fail(ExitCode::kUsage, "--stop-after stops before ", emit, " exists; use --emit ir");
    emit = "ir";
  }
  InputFileLog reads;
  reads.add_path(path, "the input model '" + path + "'");
  if (!options.config_path.empty()) reads.add_path(options.config_path, "the config '" + options.config_path + "'");
  for (const FreezeSpec& f : options.freeze)
    if (f.value.size() > 4 && f.value.compare(f.value.size() - 4, 4, ".npy") == 0)
      reads.add_path(f.value, "the frozen value of '" + f.input + "'");
  if (output.empty() && emit.empty()) output = default_output(path);
  if (!output.empty() && output != "-") refuse_output_over_input(output, reads);
  if (!report_path.empty()) refuse_output_over_input(report_path, reads);
  if (!quant_svg.empty()) {
    if (!options.quantize) fail(ExitCode::kUsage, "--quant-report needs --quantize w8a8");
    refuse_output_over_input(quant_svg, reads);
  }
  CompileReport report;
  report.model = path;
  auto finish = [&](const std::string& written) {
    report.output = written;
    report.total_ms = ms_since(start);
    if (!report_path.empty()) write_compile_output(report_path, report_to_json(report), reads);
  };
  Progress progress;
  std::string qdq_bytes, quant_text;
  if (options.quantize) {
    quant::QuantizeResult q = calibrate(path, options, &progress);
    if (!q.qdq.SerializeToString(&qdq_bytes)) fail(ExitCode::kInternal, "cannot serialize the quantized model");
    report.quantization_json = quant::quant_report_json(q);
    quant_text = quant::quant_report_text(q);
    if (!quant_svg.empty()) write_compile_output(quant_svg, quant::quant_report_svg(q), reads);
  }
  Model m = load_and_infer(path, options, flags, &report, &progress, options.quantize ? &qdq_bytes : nullptr);
  progress.clear();
  // --stop-after is for looking at the IR between passes, also of models cuvil cannot lower yet.
  if (flags.stop_after.empty()) frontend::check_supported(m);
  if (emit == "ir") {
    std::string text = model_to_string(m);
    if (output.empty() || output == "-") std::cout << text;
    else write_compile_output(output, text, reads);
    finish(output.empty() ? "-" : output);
    return 0;
  }
  auto stage = Clock::now();
  const std::vector<codegen::Bucket> buckets = codegen::plan_buckets(m, options.buckets);
  codegen::LowerOptions lo = lower_options(m, options, &report.pattern_matches);
  // One lowering per bucket, with the bucket's ranges: every range-dependent decision (proofs,
  // the memory plan) is made for that bucket. Bucket 0's result is what the report shows.
  std::vector<codegen::LoweredModel> bucket_programs;
  for (size_t i = 0; i < buckets.size(); ++i) {
    progress.show("[3/4] lowering" + (buckets.size() > 1 ? " bucket " + std::to_string(i + 1) + " of " +
                                                           std::to_string(buckets.size())
                                                     : std::string()));
    Model mb = m;  // shares the graph; only the ranges differ
    for (const auto& [name, r] : buckets[i].ranges) mb.ranges.set(name, r);
    bucket_programs.push_back(codegen::lower_model(mb, lo));
  }
  codegen::LoweredModel& lowered = bucket_programs.front();
  report.lower_ms = ms_since(stage);
  report.buckets = static_cast<int64_t>(buckets.size());
  report.tile_kernels = lowered.fused_kernels;
  report.fused_nodes = lowered.fused_nodes;
  report.op_calls = lowered.call_ops;
  report.nodes_not_emitted = lowered.skipped_nodes;
  report.arena_bytes = lowered.arena_expr;
  report.kernel_nodes = lowered.kernel_nodes;
  report.not_fused = lowered.not_fused;
  progress.clear();
  if (emit == "ptx") {
    // The megakernel PTX the package's PTX section holds: the whole megakernel, the same for
    // every package (docs/ptx.md says what per-package specialisation would remove).
    if (codegen::megakernel_ptx().empty())
      fail(ExitCode::kUnsupported, "--emit ptx: this cuvilc was built without the megakernel PTX (clang-19 was not "
                                   "found when it was built)");
    const std::string text(codegen::megakernel_ptx());
    if (output.empty() || output == "-") std::cout << text;
    else write_compile_output(output, text, reads);
    finish(output.empty() ? "-" : output);
    return 0;
  }
  if (emit == "bytecode") {
    std::string text = rt::disassemble(lowered.program);
    if (output.empty() || output == "-") std::cout << text;
    else write_compile_output(output, text, reads);
    finish(output.empty() ? "-" : output);
    return 0;
  }
  stage = Clock::now();
  // The weights go from the model's tensors straight into the file (no copy of the package in
  // memory). Before the file replaces `output`, the model is let go (nothing below reads it)
  // and the runtime's own loader verifies the written bytes, mapped from the temporary.
  std::vector<codegen::BucketProgram> programs;
  for (size_t i = 0; i < buckets.size(); ++i) programs.push_back({&bucket_programs[i], buckets[i]});
  progress.show("[4/4] writing and verifying " + output);
  const KvCacheAnalysis kv = find_kv_cache(m, options.kv_cache);
  codegen::PackagePieces pieces = codegen::build_package_pieces(
      m, programs, passes_summary(report.passes) + quant_text,
      include_ptx ? codegen::megakernel_ptx_section() : std::vector<uint8_t>{}, kv.pairs);
  Pieces data{std::string_view(reinterpret_cast<const char*>(pieces.head.data()), pieces.head.size())};
  data.insert(data.end(), pieces.weights.begin(), pieces.weights.end());
  refuse_output_over_input(output, reads);
  write_file_atomically(output, data, [&](int fd, uint64_t size) {
    CUVIL_ASSERT(size == pieces.size, "wrote " << size << " package bytes of " << pieces.size);
    pieces.weights.clear();
    for (codegen::LoweredModel& l : bucket_programs) l.weight_pieces.clear();
    m = Model{};
    verify_written_package(fd, size);
  });
  report.package_ms = ms_since(stage);
  report.package_bytes = static_cast<int64_t>(pieces.size);
  progress.clear();
  finish(output);
  std::cerr << "cuvilc: wrote " << output << " (" << pieces.size << " bytes; " << lowered.fused_kernels
            << " tile kernels fusing " << lowered.fused_nodes << " nodes, " << lowered.call_ops
            << " op calls"
            << (lowered.skipped_nodes ? ", " + std::to_string(lowered.skipped_nodes) + " shape nodes not needed" : "")
            << (buckets.size() > 1 ? "; " + std::to_string(buckets.size()) + " bucket programs" : "")
            << (kv.pairs.empty() ? "" : "; KV cache: " + std::to_string(kv.pairs.size()) + " state tensors")
            << "; arena " << lowered.arena_expr << " bytes)\n";
  // Pairs that --kv-cache auto could not keep: say why where the user looks, not only in the report.
  if (kv.found && kv.pairs.empty()) std::cerr << "cuvilc: note: KV cache not kept as state: " << kv.why_not << "\n";
  if (!quant_text.empty()) std::cerr << quant_text;
  return 0;
}

// `cuvilc quantize`: the calibrated QDQ model, written as ONNX (quant/quantize.h).
int run_quantize(const std::string& path, const std::string& output, const CompileOptions& options,
                 const std::string& quant_svg, const std::string& report_path) {
  InputFileLog reads;
  reads.add_path(path, "the input model '" + path + "'");
  if (!options.config_path.empty()) reads.add_path(options.config_path, "the config '" + options.config_path + "'");
  if (!options.quant.calib_dir.empty()) reads.add_path(options.quant.calib_dir, "the calibration directory");
  for (const std::string& o : {output, quant_svg, report_path})
    if (!o.empty()) refuse_output_over_input(o, reads);
  Progress progress;
  quant::QuantizeResult q = calibrate(path, options, &progress);
  std::string bytes;
  if (!q.qdq.SerializeToString(&bytes)) fail(ExitCode::kInternal, "cannot serialize the quantized model");
  write_compile_output(output, bytes, reads);
  if (!quant_svg.empty()) write_compile_output(quant_svg, quant::quant_report_svg(q), reads);
  if (!report_path.empty()) write_compile_output(report_path, quant::quant_report_json(q, "") + "\n", reads);
  std::cerr << "cuvilc: wrote " << output << " (" << bytes.size() << " bytes)\n" << quant::quant_report_text(q);
  return 0;
}

int main_impl(int argc, char** argv) {
  CLI::App app{"cuvilc: the cuvil ahead-of-time ONNX model compiler.\n" + std::string(kExitCodes)};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cuvilc 0.1.0");

  std::string inspect_path;
  CommandLineSettings inspect_settings;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "Summarise an ONNX model: inputs/outputs with symbolic shapes, opsets, op "
                 "histogram after the passes, parameter count and bytes, shape-inference coverage, "
                 "every unsupported op with its node name; then the tile kernels with the nodes "
                 "each fuses, and every node not fused with why. A .cuvir: its manifest, report "
                 "and (--disasm) bytecode.");
  bool inspect_disasm = false;
  inspect->add_option("model", inspect_path, "ONNX model (.onnx) or compiled package (.cuvir)")->required();
  inspect->add_option("--dim", inspect_settings.dims, kDimHelp);
  inspect->add_option("--freeze", inspect_settings.freeze, kFreezeHelp)->option_text("NAME=VALUE");
  inspect->add_option("--config", inspect_settings.config, kConfigHelp);
  inspect->add_flag("--disasm", inspect_disasm, "For a .cuvir package: print the disassembled program");
  add_limit_options(inspect, &inspect_settings);
  inspect->footer(kExitCodes);

  std::string compile_path, emit = "", output;
  CommandLineSettings compile_settings;
  CLI::App* compile = app.add_subcommand(
      "compile", "Compile an ONNX model into a .cuvir package (bytecode + weights + manifest), "
                 "verified with the runtime's loader before it is written. `--emit ir` prints the IR "
                 "after the passes (graph rewrites, symbolic shape inference; docs/ir.md); `--emit bytecode` the disassembled "
                 "program (docs/isa.md). If/Loop/Scan become program-level control flow.");
  compile->add_option("model", compile_path, "ONNX model file (.onnx)")->required();
  compile->add_option("--emit", emit,
                      "Print a stage instead of writing a package: ir | bytecode | ptx (the GPU megakernel's "
                      "PTX, sm_80, PTX ISA 7.0, as the package's PTX section holds it; docs/ptx.md)")
      ->check(CLI::IsMember({"ir", "bytecode", "ptx"}));
  compile->add_option("-o,--output", output,
                      "Output file. Default: <model>.cuvir in the current directory (with --emit: "
                      "standard output; '-' also means standard output). Written atomically; an "
                      "existing file is left untouched when the compile fails. A path naming the "
                      "model or one of its external data files is refused.");
  bool no_ptx = false;
  compile->add_flag("--no-ptx", no_ptx,
                    "Leave the PTX section (the GPU megakernel, docs/ptx.md) out of the package; it is "
                    "included by default when this cuvilc was built with it");
  compile->add_flag("--no-fusion", compile_settings.no_fusion, "Do not build tile kernels (fused elementwise chains, reductions, MatMul/Gemm, casts): only CallOps");
  compile->add_option("--layout", compile_settings.layout,
                      "Convolution layout: nhwc runs every chain of convolutions (with the max, average and "
                      "global pools inside and after it) channels-last with Transposes at its boundaries; auto (default) only chains of at least 3 convs; "
                      "nchw none. Config key layout; pass choose-layout.")
      ->check(CLI::IsMember({"auto", "nchw", "nhwc"}));
  compile->add_option("--kv-cache", compile_settings.kv_cache,
                      "KV cache as session state: decoder inputs/outputs with present = Concat(past, new) "
                      "along the past symbol become state the session keeps (sized by --dim past=0:N). "
                      "auto (default) keeps them when every range is bounded, on requires it, off never. "
                      "Config key kv_cache; pass kv-cache; docs/kv_cache.md.")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  compile->add_option("--dim", compile_settings.dims, kDimHelp);
  compile->add_option("--freeze", compile_settings.freeze, kFreezeHelp)->option_text("NAME=VALUE");
  compile->add_option("--buckets", compile_settings.buckets,
                      "Shape buckets: one program per bucket, the first whose range holds runs. "
                      "name=b1,b2,... gives inclusive upper bounds of consecutive buckets (seq=1,16,128 "
                      "with --dim seq=1:512: seq 1, 2..16, 17..128, 129..512); name=pow2 powers of two up "
                      "to the range's maximum; auto (default) one program. Repeatable (one per symbol; "
                      "several symbols multiply). Config key buckets; docs/buckets.md.")
      ->option_text("SPEC");
  compile->add_option("--config", compile_settings.config, kConfigHelp);
  add_limit_options(compile, &compile_settings);
  PipelineFlags pipeline_flags;
  std::string report_path;
  std::vector<std::string> pass_names = {kStopAfterImport};
  for (const PassInfo& p : all_passes()) pass_names.push_back(p.name);
  compile->add_option("--stop-after", pipeline_flags.stop_after, pass_help())
      ->check(CLI::IsMember(pass_names));
  compile->add_option("--skip-pass", pipeline_flags.skip,
                      "Do not run this pass (repeatable; any pass but infer-shapes), e.g. "
                      "--skip-pass canonicalize to compare a model compiled with and without a rewrite")
      ->check(CLI::IsMember(std::vector<std::string>(pass_names.begin() + 1, pass_names.end())));
  compile->add_flag("--print-after-all", pipeline_flags.print_after_all,
                    "Print the IR to standard error after every pass, with its node counts");
  compile->add_option("--report", report_path,
                      "Write a JSON compile report: per-pass time and node counts, tile kernels, "
                      "op calls, arena, time per stage, peak memory (docs/cli.md)");
  compile->add_option("--quantize", compile_settings.quantize,
                      "w8a8: calibrate on --calib DIR and compile the QDQ model (int8 weights and "
                      "activations; docs/quantization.md); none: float. Config key quantize.scheme")
      ->check(CLI::IsMember({"w8a8", "none"}));
  add_quant_options(compile, &compile_settings);
  compile->footer(kExitCodes);

  std::string quantize_path, quantize_output, quantize_report;
  CommandLineSettings quantize_settings;
  CLI::App* quantize = app.add_subcommand(
      "quantize", "Calibrate an ONNX model on --calib DIR and write it in the standard QDQ form "
                  "(QuantizeLinear/DequantizeLinear around MatMul/Gemm/Conv, int8 per-channel weights; "
                  "what ONNX Runtime's quantize_static writes), with the per-layer error report on "
                  "standard error (docs/quantization.md).");
  quantize->add_option("model", quantize_path, "ONNX model file (.onnx)")->required();
  quantize->add_option("-o,--output", quantize_output, "The QDQ model to write (.onnx)")->required();
  quantize->add_option("--dim", quantize_settings.dims, kDimHelp);
  quantize->add_option("--config", quantize_settings.config, kConfigHelp);
  quantize->add_option("--report", quantize_report, "Write the per-layer error report as JSON");
  add_quant_options(quantize, &quantize_settings);
  add_limit_options(quantize, &quantize_settings);
  quantize->footer(kExitCodes);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(ExitCode::kUsage);
  }
  if (*inspect) return run_inspect(inspect_path, resolve_options(inspect_settings), inspect_disasm);
  if (*quantize)
    return run_quantize(quantize_path, quantize_output, resolve_options(quantize_settings), quantize_settings.quant_report,
                        quantize_report);
  return run_compile(compile_path, emit, output, resolve_options(compile_settings), pipeline_flags, report_path,
                     !no_ptx, compile_settings.quant_report);
}

}  // namespace
}  // namespace cuvil

int main(int argc, char** argv) {
  using cuvil::ExitCode;
  try {
    return cuvil::main_impl(argc, argv);
  } catch (const cuvil::Diagnostic& d) {
    std::cerr << "cuvilc: error: " << d.what() << "\n";
    return static_cast<int>(d.code());
  } catch (const cuvil::InternalError& e) {
    std::cerr << "cuvilc: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kInternal);
  } catch (const std::bad_alloc&) {
    std::cerr << "cuvilc: error: out of memory\n";
    return static_cast<int>(ExitCode::kInternal);
  } catch (const std::exception& e) {
    std::cerr << "cuvilc: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kInternal);
  }
}
