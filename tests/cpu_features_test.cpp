// The kernel path table: the CPU always supports portable, supported paths nest, a path the
// CPU lacks is refused, and switching is visible to active_cpu_path.
#include <gtest/gtest.h>

#include "runtime/cpu/cpu_features.h"

namespace cuvil::rt {
namespace {

TEST(CpuFeatures, PathsNestAndSwitch) {
  const std::vector<CpuPath> paths = supported_cpu_paths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), CpuPath::Portable);
  if (cpu_path_supported(CpuPath::Avx512)) {
    EXPECT_TRUE(cpu_path_supported(CpuPath::Avx2));
  }
  const CpuPath before = active_cpu_path();
  for (CpuPath p : paths) {
    EXPECT_TRUE(set_cpu_path_for_testing(p));
    EXPECT_EQ(active_cpu_path(), p);
  }
  for (CpuPath p : {CpuPath::Avx2, CpuPath::Avx512})
    if (!cpu_path_supported(p)) {
      EXPECT_FALSE(set_cpu_path_for_testing(p)) << cpu_path_name(p);
      EXPECT_NE(active_cpu_path(), p);
    }
  EXPECT_TRUE(set_cpu_path_for_testing(before));
  EXPECT_NE(cpu_features_summary().find(cpu_path_name(before)), std::string::npos);
}

}  // namespace
}  // namespace cuvil::rt
