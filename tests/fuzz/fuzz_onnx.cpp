// libFuzzer target for the compiler: ONNX bytes go the way `cuvilc compile` takes them
// (import, verify_model, run_passes, check_supported, lower_model, build_package) and the
// package comes back through the runtime's own loader, as cuvilc checks before writing it. A
// Diagnostic is an expected outcome; an InternalError (exit 70 in cuvilc), any other
// exception, a crash, a sanitizer report, a timeout, or a package the loader rejects is a
// finding. The IR printer (`--emit ir`) and the disassembler (`--emit bytecode`) run too.
// Odd-sized inputs are lowered with fusion off (`--no-fusion`), even-sized ones with it on,
// so both code generators are fuzzed and each input stays deterministic.
//
// The structure-aware mutator (mutating the parsed ModelProto) is fuzz_onnx_mutator.cpp.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string_view>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "frontend/onnx_import.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"
#include "runtime/disasm.h"
#include "runtime/package.h"
#include "support/error.h"
#include "tests/fuzz/fuzz_entries.h"

namespace cuvil::fuzz {

// Caps below cuvilc's defaults: a 64 KB input may legitimately ask for up to the default caps
// (about 1 GiB of inlining), which is tested by BadInputResourceLimits; here the fuzzer's
// time goes to many small inputs instead, and the caps' own refusals are exercised too.
CompileLimits fuzz_limits() {
  CompileLimits l;
  l.max_nodes = 100000;
  l.max_inlined_nodes = 100000;
  l.max_inlined_bytes = int64_t{64} << 20;
  l.max_tensor_elements = int64_t{1} << 26;
  return l;
}

std::string fuzz_onnx_one(const uint8_t* data, size_t size) {
  return run_compiler_input<Diagnostic, InternalError>(
      [&]() -> std::string {
        // No model directory: external data is refused with a diagnostic, never read from disk.
        frontend::ImportOptions import;
        import.limits = fuzz_limits();
        Model model = frontend::import_onnx_bytes(
            std::string_view(reinterpret_cast<const char*>(data), size), "", import, "fuzz.onnx");
        verify_model(model);
        PipelineOptions pipeline;
        pipeline.context.limits = import.limits;
        run_passes(model, pipeline);
        frontend::check_supported(model);
        volatile size_t text_size = model_to_string(model).size();
        (void)text_size;
        codegen::LowerOptions options;
        options.fuse_elementwise = size % 2 == 0;
        codegen::LoweredModel lowered = codegen::lower_model(model, options);
        volatile size_t listing_size = rt::disassemble(lowered.program).size();
        (void)listing_size;
        std::vector<uint8_t> bytes = codegen::build_package(model, lowered);
        std::shared_ptr<rt::LoadedPackage> package;
        rt::Status st = rt::LoadedPackage::open_memory(bytes.data(), bytes.size(), /*copy=*/true, &package);
        if (!st.is_ok()) return "the compiler wrote a package its loader rejects: " + st.message();
        return "";
      },
      [](const Diagnostic& d) -> std::string {
        return std::string_view(d.what()).empty() ? "a diagnostic without a message" : "";
      });
}

}  // namespace cuvil::fuzz

#if defined(CUVIL_FUZZ_STANDALONE)
CUVIL_FUZZ_DEFINE_STANDALONE_MAIN(cuvil::fuzz::fuzz_onnx_one)
#elif !defined(CUVIL_FUZZ_ENTRY_ONLY)
CUVIL_FUZZ_DEFINE_TEST_ONE_INPUT(cuvil::fuzz::fuzz_onnx_one)
#endif
