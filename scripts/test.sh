#!/usr/bin/env bash
# The README's test command: set up (install missing packages, build) and run every test.
# Then builds with ASan+UBSan and runs the bad-input tests under it, and runs each libFuzzer
# target for 30 seconds (scripts/fuzz.sh; build-fuzz holds only the fuzz targets' libraries).
#   usage: scripts/test.sh [--no-sanitizers]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitizers=1
[ "${1:-}" = "--no-sanitizers" ] && sanitizers=0

bash "$here/scripts/setup.sh" --build-dir "$here/build"
ctest --test-dir "$here/build" --output-on-failure -j2

if [ "$sanitizers" -eq 1 ]; then
  bash "$here/scripts/setup.sh" --build-dir "$here/build-asan" --sanitize address
  # Bad-input tests (ONNX files incl. the cuvilc CLI cases, malformed control flow and the
  # resource caps (BadInputControlFlow, BadInputResourceLimits), packages, run-time inputs, .npy
  # files, kernel inputs), cuvil-run, concurrent runs, thread-start failure, deadlines and
  # cancellation, the config reader, the parsers and the atomic output writer under faults
  # (OutputFile: killed writes, full disk) under AddressSanitizer + UndefinedBehaviorSanitizer.
  # The Conformance suites stay out: too slow for this stage.
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$here/build-asan" --output-on-failure -j2 \
      -R '^(BadInput|BadPackage|Package|Frontend|Symbolic|BadRuntimeInput|BadNpy|BadKernelInput|CliRun|RuntimeConcurrency|ControlFlow|LoopSequences|TfIdfVectorizerKernel|OutputFile|RuntimeThreads|RuntimeDeadline|RuntimeCancel|Config|Canonicalize|ShapeArithmetic|PassGolden|FuzzRegressions)'

  # Fuzz smoke stage: every target for ~30 s from the in-tree seeds; a finding fails the stage.
  bash "$here/scripts/fuzz.sh" all 30
fi
