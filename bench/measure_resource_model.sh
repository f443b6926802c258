#!/bin/sh
# Measures cuvilc on the amplification families of bench/amplification_models.py: for each
# family and size, the file size, exit code, wall time and peak RSS (/usr/bin/time -v) of
# `cuvilc compile --emit ir`, as one markdown table row (docs/security.md, "Resource model").
#
# usage: bench/measure_resource_model.sh CUVILC [OUTDIR] [FAMILY:SIZE ...]
#   default sizes: nested_loop 1..30, nested_if 1..30, functions 5..30, flat 1e3..1e7
# Extra cuvilc options go in CUVILC_OPTS (e.g. CUVILC_OPTS="--max-nesting-depth 64").
# Memory is bounded with `ulimit -v` (MEMORY_KB, default 8 GiB) so an unbounded case ends in
# "out of memory" instead of taking the machine; TIMEOUT (default 600 s) bounds the time.
set -eu
cuvilc=${1:?usage: $0 CUVILC [OUTDIR] [FAMILY:SIZE ...]}
out=${2:-/tmp/cuvil-resource-model}
shift $(( $# >= 2 ? 2 : 1 ))
here=$(dirname "$0")
mkdir -p "$out"
cases="$*"
if [ -z "$cases" ]; then
  cases="nested_loop:1 nested_loop:5 nested_loop:10 nested_loop:20 nested_loop:30
         nested_if:1 nested_if:10 nested_if:20 nested_if:30
         functions:5 functions:10 functions:15 functions:20 functions:30
         flat:1000 flat:100000 flat:1000000 flat:10000000"
fi
echo "| family | size | file bytes | exit | seconds | peak RSS (MB) |"
echo "|---|---:|---:|---:|---:|---:|"
for c in $cases; do
  family=${c%%:*}
  size=${c#*:}
  model="$out/${family}_${size}.onnx"
  [ -f "$model" ] || python3 "$here/amplification_models.py" "$family" "$size" "$model"
  bytes=$(stat -c %s "$model")
  set +e
  ( ulimit -v "${MEMORY_KB:-8388608}"
    exec /usr/bin/time -v -o "$out/time.txt" timeout "${TIMEOUT:-600}" \
      "$cuvilc" compile "$model" --emit ir -o /dev/null ${CUVILC_OPTS:-} ) 2>"$out/stderr.txt"
  rc=$?
  set -e
  secs=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$out/time.txt" |
         awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.2f", s }')
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$out/time.txt")
  echo "| $family | $size | $bytes | $rc | $secs | $(( ${rss:-0} / 1024 )) |"
done
