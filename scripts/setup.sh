#!/usr/bin/env bash
# Installs every Debian package cuvil's build, tests and model-export scripts need, then
# configures and builds. Idempotent: packages already present are skipped, `apt-get update`
# runs at most once per invocation and only when something is missing. Works as root on a
# fresh Debian 12 (uses sudo when not root and sudo exists). --fuzz configures the build
# directory (default build-fuzz) for the libFuzzer targets instead: clang-19, CUVIL_FUZZ=ON.
#
# usage: scripts/setup.sh [--no-build] [--build-dir DIR] [--sanitize address|thread] [--fuzz]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$here/build"
do_build=1
sanitize=""
fuzz=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) do_build=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --sanitize) sanitize="$2"; shift ;;
    --fuzz) fuzz=1; [ "$build_dir" = "$here/build" ] && build_dir="$here/build-fuzz" ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

packages=(
  build-essential cmake ninja-build pkg-config git
  libonnx-dev libonnx-testdata python3-onnx python3-numpy
  libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libcli11-dev libgtest-dev
  libzstd-dev
  # Rebuilds of unchanged files come from the cache, also in a fresh clone or worktree of the
  # repository elsewhere on the machine (CCACHE_BASEDIR below).
  ccache
  # libFuzzer targets (scripts/fuzz.sh): clang, its sanitizer and fuzzer runtimes, and
  # llvm-symbolizer for readable sanitizer stacks.
  clang-19 libclang-rt-19-dev llvm-19
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo_cmd=(sudo); else
      echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; fi
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update
  "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

if [ "$do_build" -eq 1 ]; then
  cmake_args=(-S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  if [ -n "$sanitize" ]; then cmake_args+=(-DCUVIL_SANITIZE="$sanitize"); fi
  if [ "$fuzz" -eq 1 ]; then cmake_args+=(-DCUVIL_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-19); fi
  # ccache, where the machine has it, makes rebuilds of unchanged files free (it never changes
  # what is built).
  if command -v ccache >/dev/null; then
    cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    # Paths under the checkout are hashed relative to it and the working directory is left out
    # of the hash, so a clean clone at another path hits the cache of an earlier build (the
    # debug info's compilation directory may then name the earlier checkout; code is the same).
    export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
  fi
  cmake "${cmake_args[@]}"
  cmake --build "$build_dir" -j2
fi
