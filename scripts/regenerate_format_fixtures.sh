#!/usr/bin/env bash
# Rewrites every checked-in file whose bytes depend on the package format (docs/format.md),
# after an intended format change; never edit them by hand.
#   - tests/fuzz/corpus/fuzz_package/tiny.bin and two_programs.bin: the hand-built packages of
#     tests/package_test.cpp (Package.Golden* with CUVIL_UPDATE_GOLDEN=1)
#   - tests/fuzz/corpus/fuzz_package/<name>.pkg: compiled by cuvilc from the ONNX seed
#     tests/fuzz/corpus/fuzz_onnx/<name>.onnx
# Then it loads every rewritten package with `cuvilc inspect` (each must verify).
#   usage: scripts/regenerate_format_fixtures.sh [BUILD_DIR]   (default: build; must be built)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
cuvilc="$build/cuvilc"
tests="$build/tests/cuvil_tests"
for f in "$cuvilc" "$tests"; do
  [ -x "$f" ] || { echo "regenerate_format_fixtures: $f is missing; build first (cmake --build $build)" >&2; exit 1; }
done
corpus="$here/tests/fuzz/corpus"

CUVIL_UPDATE_GOLDEN=1 "$tests" --gtest_filter='Package.Golden*' >/dev/null
echo "rewrote tests/fuzz/corpus/fuzz_package/tiny.bin and two_programs.bin"

for pkg in "$corpus"/fuzz_package/*.pkg; do
  name="$(basename "$pkg" .pkg)"
  onnx="$corpus/fuzz_onnx/$name.onnx"
  [ -f "$onnx" ] || { echo "regenerate_format_fixtures: no ONNX seed $onnx for $pkg" >&2; exit 1; }
  # --no-ptx: the seeds stay small (the PTX section has its own tests, tests/ptx_section_test.cpp).
  "$cuvilc" compile "$onnx" --no-ptx -o "$pkg" >/dev/null
  echo "rewrote tests/fuzz/corpus/fuzz_package/$name.pkg from fuzz_onnx/$name.onnx"
done

for pkg in "$corpus"/fuzz_package/*.pkg "$corpus"/fuzz_package/*.bin; do
  "$cuvilc" inspect "$pkg" >/dev/null
done
echo "every package verifies"
