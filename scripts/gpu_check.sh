#!/usr/bin/env bash
# The GPU check of the PTX megakernel (docs/ptx.md, "Checking on a GPU"), in two halves:
#
#   scripts/gpu_check.sh --prepare [DIR]   here (the build machine): builds cuvil_gpu_check (the
#                                          C++ runtime linked in; libcuvil.so copied next to it)
#                                          and compiles the check models into DIR (default
#                                          gpu-check/, a few MiB: far below the 64 MiB a GPU
#                                          machine receives)
#   scripts/gpu_check.sh --run [DIR]       on the GPU machine (the NVIDIA driver, none of the
#                                          build dependencies): GPU vs CPU on every package,
#                                          one markdown table; exit 0 when all agree, 1 when
#                                          one differs, 4 when CUDA cannot be used
#
# With the device tool: prepare here, then run `bash scripts/gpu_check.sh --run gpu-check` there
# with carry ["gpu-check"]. Without a GPU, `CUVIL_CUDA_DRIVER=<build>/tests/libcuvil_fake_cuda.so
# FAKE_CUDA_EMULATE=1 scripts/gpu_check.sh --run` runs the same path on the tests' stand-in
# driver (the host grid emulator), which checks the script and the binary, not a GPU.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-}"
dir="${2:-$here/gpu-check}"
case "$mode" in
  --prepare)
    build="${CUVIL_BUILD_DIR:-$here/build}"
    [ -f "$build/build.ninja" ] || bash "$here/scripts/setup.sh" --build-dir "$build"
    cmake --build "$build" -j2 --target cuvil_gpu_check cuvilc
    mkdir -p "$dir"
    cp "$build/cuvil_gpu_check" "$build/libcuvil.so" "$dir/"
    strip --strip-debug "$dir/cuvil_gpu_check" "$dir/libcuvil.so"  # the debug info is most of their size
    /usr/bin/python3 "$here/tools/gpu_check/make_models.py" "$dir/models"
    for m in "$dir"/models/*.onnx; do
      "$build/cuvilc" compile "$m" -o "$dir/$(basename "${m%.onnx}").cuvir" >/dev/null
    done
    rm -rf "$dir/models"
    du -sh "$dir"
    ;;
  --run)
    [ -x "$dir/cuvil_gpu_check" ] || { echo "gpu_check.sh: $dir/cuvil_gpu_check missing (run --prepare first)" >&2; exit 2; }
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    exec "$dir/cuvil_gpu_check" --repeats "${GPU_CHECK_REPEATS:-5}" "$dir"/*.cuvir
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
