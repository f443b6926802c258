#!/usr/bin/env bash
# --layout nchw / nhwc / auto (pass choose-layout) on the convolution models, measured in the
# same run: each package is run with `cuvil-run --bench`, alternating the layouts ROUNDS
# times, and the p50 of each is printed with its ratio to nchw (below 1: faster than NCHW).
# Decides the default of `layout:` (options/compile_options.h); run it on an idle machine.
#
# usage: bench/layout_chains.sh [ROUNDS] [THREADS]   (from the repository root, after the build)
set -euo pipefail
rounds=${1:-3}
threads=${2:-0}
root="$(cd "$(dirname "$0")/.." && pwd)"
cuvilc="$root/build/cuvilc"
run="$root/build/cuvil-run"
[ -x "$cuvilc" ] && [ -x "$run" ] || { echo "build cuvilc and cuvil-run first" >&2; exit 2; }
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" 'BEGIN { exit !(l > 0.5) }'; then echo "warning: load average $load; the machine is not idle" >&2; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for spec in resnet18:1x3x224x224 mobilenet_v2_tiny:1x3x96x96; do
  model=${spec%%:*}
  shape=${spec#*:}
  for layout in nchw nhwc auto; do
    "$cuvilc" compile "$root/testdata/models/$model.onnx" -o "$tmp/$model.$layout.cuvir" --layout "$layout" 2>/dev/null
  done
  declare -A best=()
  for ((r = 0; r < rounds; ++r)); do
    for layout in nchw nhwc auto; do
      p50=$("$run" "$tmp/$model.$layout.cuvir" --shape "input=$shape" --bench 10 --warmup 2 --threads "$threads" 2>&1 |
            sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p')
      if [ -z "${best[$layout]:-}" ] || awk -v a="$p50" -v b="${best[$layout]}" 'BEGIN { exit !(a < b) }'; then
        best[$layout]=$p50
      fi
    done
  done
  for layout in nchw nhwc auto; do
    awk -v m="$model" -v l="$layout" -v t="${best[$layout]}" -v base="${best[nchw]}" \
      'BEGIN { printf "| %s | %s | %.3f ms | %.3f x nchw |\n", m, l, t, t / base }'
  done
  unset best
done
