// Which CPU kernel path runs: chosen once at load time from the CPU's features, and forcible for
// tests and benchmarks with the environment variable CUVIL_CPU_PATH=avx512|avx2|portable (a
// path the CPU cannot run is refused, never attempted). Every kernel family that has
// instruction-set variants (GEMM micro-kernels, vectorised maths) asks here, so one variable
// switches the whole runtime and every path the machine supports can be tested on it.
//
// Paths, each a superset of the one before:
//   portable  plain C++ (the compiler's baseline x86-64 or whatever the target is)
//   avx2      AVX2 + FMA (x86-64-v3: Haswell, Zen 1-3)
//   avx512    AVX-512 F, BW, DQ, VL (x86-64-v4: Skylake-SP and later, Zen 4)
// Packages never depend on the path: layouts in a package are the same for all of them.
#pragma once

#include <string>
#include <vector>

namespace cuvil::rt {

enum class CpuPath { Portable = 0, Avx2 = 1, Avx512 = 2 };

const char* cpu_path_name(CpuPath path);
// Whether this CPU can run `path`.
bool cpu_path_supported(CpuPath path);
// The paths this CPU can run, widest last.
std::vector<CpuPath> supported_cpu_paths();
// The path in use: CUVIL_CPU_PATH if set (and supported; otherwise the widest supported path,
// with a warning on stderr once), else the widest supported path. Read once per process.
CpuPath active_cpu_path();
// Tests and benchmarks: switch the process to `path` (call between runs, not during one).
// Refuses (returns false, nothing changes) a path the CPU cannot run.
bool set_cpu_path_for_testing(CpuPath path);
// Whether the CPU has AVX-512 VNNI (int8 dot products), reported by benchmarks and W8A8.
bool cpu_has_avx512_vnni();
// "avx512 (avx512f avx512bw ... fma)" for benchmark and `cuvil-run --bench` headers.
std::string cpu_features_summary();

}  // namespace cuvil::rt
