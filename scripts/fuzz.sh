#!/usr/bin/env bash
# Runs cuvil's libFuzzer targets (tests/fuzz/README.md) for a given time each, one process per
# target. The first run, or --build, installs the packages and configures build-fuzz through
# scripts/setup.sh --fuzz (clang-19, ASan + UBSan); every run brings build-fuzz up to date.
# Each target's growing corpus is build-fuzz/corpus/<target> (the in-tree seeds
# tests/fuzz/corpus/<target> are read too, never written); findings (crash-*, timeout-*,
# oom-*, leak-*) go to build-fuzz/findings/<target>/ and the fuzzer's output to
# build-fuzz/logs/<target>.log. Prints per target: runs, corpus size, new findings; exits 1
# if any target had a finding. CI's smoke stage is `scripts/fuzz.sh all 30`.
#
#   usage: scripts/fuzz.sh [--build] TARGET|all SECONDS [libFuzzer flags...]
#   TARGET: fuzz_onnx, fuzz_package, fuzz_npy, fuzz_pb or fuzz_config
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$here/build-fuzz"
all_targets=(fuzz_onnx fuzz_package fuzz_npy fuzz_pb fuzz_config)

usage() { sed -n '11,12p' "$0" | sed 's/^# *//' >&2; exit 2; }

reconfigure=0
if [ "${1:-}" = "--build" ]; then reconfigure=1; shift; fi
[ $# -ge 2 ] || usage
which="$1"
seconds="$2"
shift 2
extra_flags=("$@")
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
if [ "$which" = all ]; then
  targets=("${all_targets[@]}")
else
  case " ${all_targets[*]} " in
    *" $which "*) targets=("$which") ;;
    *) echo "fuzz.sh: unknown target '$which' (expected all or one of: ${all_targets[*]})" >&2; exit 2 ;;
  esac
fi

if [ "$reconfigure" -eq 1 ] || [ ! -f "$build_dir/build.ninja" ]; then
  bash "$here/scripts/setup.sh" --fuzz --build-dir "$build_dir"
else
  cmake --build "$build_dir" -j2
fi

# Inputs larger than this are not generated (seeds are a few KB).
max_len_for() {
  case "$1" in
    fuzz_onnx|fuzz_package) echo 65536 ;;
    *) echo 8192 ;;
  esac
}

symbolizer=/usr/lib/llvm-19/bin/llvm-symbolizer
[ -x "$symbolizer" ] || symbolizer="$(command -v llvm-symbolizer || true)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"

status=0
mkdir -p "$build_dir/logs"
printf '%-14s %10s %8s %8s %9s\n' target runs seconds corpus findings
for t in "${targets[@]}"; do
  corpus="$build_dir/corpus/$t"
  findings="$build_dir/findings/$t"
  log="$build_dir/logs/$t.log"
  mkdir -p "$corpus" "$findings"
  stamp="$build_dir/logs/$t.start"
  : > "$stamp"
  rc=0
  started=$SECONDS
  # -timeout: one input may take 10 s (the sanitizers slow the compiler down ~3x);
  # -rss_limit_mb / -malloc_limit_mb: an input that asks for more memory is a finding.
  "$build_dir/tests/fuzz/$t" "$corpus" "$here/tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -max_len="$(max_len_for "$t")" -artifact_prefix="$findings/" -print_final_stats=1 \
    "${extra_flags[@]}" > "$log" 2>&1 || rc=$?
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
  time_s=$((SECONDS - started))
  corpus_files="$(find "$corpus" -type f | wc -l)"
  new_findings="$(find "$findings" -type f -newer "$stamp" | wc -l)"
  printf '%-14s %10s %8s %8s %9s\n' "$t" "${runs:-?}" "$time_s" "$corpus_files" "$new_findings"
  if [ "$rc" -ne 0 ] || [ "$new_findings" -ne 0 ]; then
    status=1
    echo "fuzz.sh: $t: exit $rc, $new_findings new finding(s) in $findings; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    find "$findings" -type f -newer "$stamp" | sed 's/^/  finding: /' >&2
  fi
done
exit "$status"
