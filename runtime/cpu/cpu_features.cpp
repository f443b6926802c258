// CPU feature detection and the process-wide kernel path (runtime/cpu/cpu_features.h).
#include "runtime/cpu/cpu_features.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cuvil::rt {
namespace {

bool detect(CpuPath path) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (path) {
    case CpuPath::Portable: return true;
    case CpuPath::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuPath::Avx512:
      return detect(CpuPath::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return path == CpuPath::Portable;
#endif
}

CpuPath widest() {
  for (CpuPath p : {CpuPath::Avx512, CpuPath::Avx2})
    if (detect(p)) return p;
  return CpuPath::Portable;
}

CpuPath from_environment() {
  const char* env = std::getenv("CUVIL_CPU_PATH");
  if (!env || !*env) return widest();
  for (CpuPath p : {CpuPath::Portable, CpuPath::Avx2, CpuPath::Avx512})
    if (std::strcmp(env, cpu_path_name(p)) == 0) {
      if (detect(p)) return p;
      std::fprintf(stderr, "cuvil: CUVIL_CPU_PATH=%s: this CPU cannot run it; using %s\n", env,
                   cpu_path_name(widest()));
      return widest();
    }
  std::fprintf(stderr, "cuvil: CUVIL_CPU_PATH=%s is not one of portable, avx2, avx512; using %s\n", env,
               cpu_path_name(widest()));
  return widest();
}

std::atomic<int>& current() {
  static std::atomic<int> path{static_cast<int>(from_environment())};
  return path;
}

}  // namespace

const char* cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::Portable: return "portable";
    case CpuPath::Avx2: return "avx2";
    case CpuPath::Avx512: return "avx512";
  }
  return "?";
}

bool cpu_path_supported(CpuPath path) { return detect(path); }

std::vector<CpuPath> supported_cpu_paths() {
  std::vector<CpuPath> out;
  for (CpuPath p : {CpuPath::Portable, CpuPath::Avx2, CpuPath::Avx512})
    if (detect(p)) out.push_back(p);
  return out;
}

CpuPath active_cpu_path() { return static_cast<CpuPath>(current().load(std::memory_order_relaxed)); }

bool set_cpu_path_for_testing(CpuPath path) {
  if (!detect(path)) return false;
  current().store(static_cast<int>(path), std::memory_order_relaxed);
  return true;
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

std::string cpu_features_summary() {
  std::string s = cpu_path_name(active_cpu_path());
#if defined(__x86_64__)
  __builtin_cpu_init();
  std::string list;
  // __builtin_cpu_supports takes a literal, so one line per feature.
#define CUVIL_FEATURE(f) \
  if (__builtin_cpu_supports(f)) list += (list.empty() ? "" : " ") + std::string(f);
  CUVIL_FEATURE("sse4.2")
  CUVIL_FEATURE("avx")
  CUVIL_FEATURE("avx2")
  CUVIL_FEATURE("fma")
  CUVIL_FEATURE("avx512f")
  CUVIL_FEATURE("avx512bw")
  CUVIL_FEATURE("avx512dq")
  CUVIL_FEATURE("avx512vl")
  CUVIL_FEATURE("avx512vnni")
#undef CUVIL_FEATURE
  s += " (" + list + ")";
#endif
  return s;
}

}  // namespace cuvil::rt
