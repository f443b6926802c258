#!/usr/bin/env bash
# The README's test command: set up (install missing packages, build) and run every test, in
# stages with a time budget each (a stage over its budget fails the run, naming it):
#   build             setup.sh: packages, configure, build                     25 min
#   unit              every ctest test except the conformance suites           10 min
#   onnx wheel cases  tests/onnx_wheel/make_cases.sh: the onnx 1.23.2 wheel's   15 min
#                     node cases, from PyPI into build/ (a stamp: quick once made)
#   conformance       the ONNX backend test data end to end (ratchets), the     15 min
#                     ONNX 1.12 cases and the current wheel's
#   python            scripts/test_python.sh: fresh venv, pip install . (needs   30 min
#                     PyPI), pytest python/tests (all but the engine tests)
#   serving           scripts/test_serving.sh: the cuvil wheel with Ray Serve   15 min
#                     and PyTriton (pinned, from PyPI) in two venvs; the 8-client
#                     deployment tests, which fail (not skip) without an engine
#   sanitizer build   the same tree with ASan + UBSan (cold: 20-36 min idle;   50 min
#                     a few minutes with ccache warm)
#   sanitizer         bad-input, runtime, config, pass and fuzz-replay suites   15 min
#                     under AddressSanitizer + UndefinedBehaviorSanitizer
#   fuzz smoke        every libFuzzer target for 30 s (scripts/fuzz.sh)        20 min
# Each stage prints its time; the budgets are far above today's times on a 2-core machine.
#   usage: scripts/test.sh [--no-sanitizers] [--no-python] [--no-serving]
# --no-python leaves out both PyPI stages (python and serving); --no-serving only the second.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitizers=1
python=1
serving=1
for arg in "$@"; do
  case "$arg" in
    --no-sanitizers) sanitizers=0 ;;
    --no-python) python=0; serving=0 ;;
    --no-serving) serving=0 ;;
    *) echo "test.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

stage() {
  local name="$1" budget="$2"
  shift 2
  echo "== stage: $name (budget ${budget}s)"
  local start=$SECONDS rc=0
  timeout "$budget" "$@" || rc=$?
  if [ "$rc" -eq 124 ]; then
    echo "== stage $name ran past its budget of ${budget}s" >&2
    exit 1
  fi
  echo "== stage $name: $((SECONDS - start))s, exit $rc"
  [ "$rc" -eq 0 ] || exit "$rc"
}

stage build 1500 bash "$here/scripts/setup.sh" --build-dir "$here/build"
stage unit 600 ctest --test-dir "$here/build" --output-on-failure -j2 -E '^(Conformance|ConformanceShapes|KernelConformance|ConformanceWheel)\.'
# The current onnx wheel's node cases for ConformanceWheel (a venv from PyPI; quick once made).
# A pip or generator failure fails the stage with its message.
stage "onnx wheel cases" 900 bash "$here/tests/onnx_wheel/make_cases.sh" "$here/build"
stage conformance 900 ctest --test-dir "$here/build" --output-on-failure -j2 -R '^(Conformance|ConformanceShapes|KernelConformance|ConformanceWheel)\.'
# The Python package: its own build of libcuvil and cuvilc through pip (the first run compiles
# them; build-python/ keeps the tree for the next), then pytest.
if [ "$python" -eq 1 ]; then
  stage python 1800 bash "$here/scripts/test_python.sh"
fi
# The serving deployments on loopback, in venvs with the engines (about 1 GB installed from
# PyPI on each run in a clean clone: pip's HTTP cache stays empty on these machines; about
# 2 min in all); the wheel comes from the python stage's build tree, so nothing is compiled
# again after it.
if [ "$serving" -eq 1 ]; then
  stage serving 900 bash "$here/scripts/test_serving.sh"
fi

if [ "$sanitizers" -eq 1 ]; then
  stage "sanitizer build" 3000 bash "$here/scripts/setup.sh" --build-dir "$here/build-asan" --sanitize address
  # Bad-input tests (ONNX files incl. the cuvilc CLI cases, malformed control flow and the
  # resource caps (BadInputControlFlow, BadInputResourceLimits), packages, run-time inputs, .npy
  # files, kernel inputs, the attention, convolution, transpose and tree-ensemble kernels, --freeze and If
  # branches of different ranks), cuvil-run (with its traces and reports), concurrent runs, thread-start failure, the worker pool and run statistics, deadlines and
  # cancellation, the config reader, the passes, the fuzz corpora and regressions, the parsers
  # and the atomic output writer under faults (OutputFile: killed writes, full disk), and
  # vec_math (VecMath: its table lookups by a computed index, its float-to-int steps). The
  # Conformance suites stay out: too slow for this stage.
  export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  stage sanitizer 900 ctest --test-dir "$here/build-asan" --output-on-failure -j2 \
    -R '^(BadInput|BadPackage|Package|Frontend|Symbolic|BadRuntimeInput|BadNpy|BadKernelInput|CliRun|RuntimeConcurrency|ControlFlow|LoopSequences|TfIdfVectorizerKernel|OutputFile|RuntimeThreads|RuntimeDeadline|RuntimeCancel|RuntimeDispatch|RuntimeRunStats|Config|Canonicalize|ShapeArithmetic|PassGolden|FuzzRegressions|LowerGenerators|FusedAttentionKernel|PoolKernel|ChooseLayout|FusedLinearKernel|CliRunFused|FusedPointwiseKernel|QuickGeluConfigs|ModelReferences|FuseAttentionModels|RunTrace|CliRunTrace|KvCache|FirstRun|KvCachePackage|CliGenerate|CliDevice|QuantCalibData|QuantObserver|QuantQdq|QuantCli|QuantConfig|GemmInt8Kernel|Int8OpsKernel|QdqImport|Megakernel|MegakernelDeviceForm|PtxSection|CuvilcPtx|ConvIgemmKernel|ConvIgemmInt8Kernel|GemmKernel|DftKernel|DeformConvKernel|MlOps|ConvDepthwiseKernel|TransposeKernel|Freeze|IfBranchRanks|VecMath)'
  unset ASAN_OPTIONS UBSAN_OPTIONS
  # Every target for ~30 s from the in-tree seeds; a finding fails the stage.
  stage "fuzz smoke" 1200 bash "$here/scripts/fuzz.sh" all 30
fi
