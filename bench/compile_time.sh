#!/usr/bin/env bash
# Compile time and peak memory of `cuvilc compile` next to ONNX Runtime's session creation for
# the same file (the moment a user of ORT pays for its graph optimisations), alternating the
# two, ROUNDS times each; prints one markdown row per tool with the median and the range.
#
# usage: bench/compile_time.sh MODEL.onnx [ROUNDS]   (run from the repository root after
#        `bash scripts/make_venv.sh`; warns when the machine is busy)
# Example model: /usr/bin/python3 bench/export_bert_base.py /tmp/bert_base.onnx
set -euo pipefail
model=${1:?usage: $0 MODEL.onnx [ROUNDS]}
rounds=${2:-5}
root="$(cd "$(dirname "$0")/.." && pwd)"
cuvilc="$root/build/cuvilc"
py="$root/.venv/bin/python"
[ -x "$cuvilc" ] || { echo "build cuvilc first (build/cuvilc)" >&2; exit 2; }
[ -x "$py" ] || { echo "make the venv first: bash scripts/make_venv.sh" >&2; exit 2; }
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" 'BEGIN { exit !(l > 0.5) }'; then echo "warning: load average $load; the machine is not idle" >&2; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ort_script="$tmp/ort_session.py"
cat > "$ort_script" <<'PY'
import resource, sys, time
import onnxruntime as ort
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = 1
t = time.perf_counter()
ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
print(f"{time.perf_counter() - t:.3f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")
PY
cuvil_t=() cuvil_m=() ort_t=() ort_m=()
for ((i = 0; i < rounds; i++)); do
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$cuvilc" compile "$model" -o "$tmp/m.cuvir" 2>/dev/null
  read -r t m < "$tmp/time"
  cuvil_t+=("$t"); cuvil_m+=($((m / 1024)))
  read -r t m < <("$py" "$ort_script" "$model")
  ort_t+=("$t"); ort_m+=("$m")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
range() { printf '%s\n' "$@" | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {print lo "-" hi}'; }
size_mb=$(($(stat -c %s "$model") / 1048576))
echo "model: $model ($size_mb MiB), $rounds rounds alternating, load average at start $load"
echo "| tool | seconds (median) | range | peak RSS MiB (median) | RSS / model size |"
echo "|---|---:|---:|---:|---:|"
m=$(median "${cuvil_m[@]}"); echo "| cuvilc compile | $(median "${cuvil_t[@]}") | $(range "${cuvil_t[@]}") | $m | $(awk -v a="$m" -v b="$size_mb" 'BEGIN{printf "%.2f", a/b}') |"
m=$(median "${ort_m[@]}"); echo "| onnxruntime InferenceSession (ORT_ENABLE_ALL, python process) | $(median "${ort_t[@]}") | $(range "${ort_t[@]}") | $m | $(awk -v a="$m" -v b="$size_mb" 'BEGIN{printf "%.2f", a/b}') |"
