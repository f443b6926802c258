// The megakernel's PTX built into cuvilc (codegen/ptx/megakernel_device.cu, compiled by
// clang-19 at build time for sm_80, PTX ISA 7.0; docs/ptx.md), for `cuvilc compile --emit ptx`
// and the PTX section of packages (runtime/ptx_section.h). A cuvilc built without clang-19 has
// none: then packages carry no PTX section and --emit ptx is refused.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace cuvil::codegen {

std::string_view megakernel_ptx();  // empty when not built in
// The PTX section's bytes: one record (sm_80, PTX 7.0) with megakernel_ptx(); empty without it.
std::vector<uint8_t> megakernel_ptx_section();

}  // namespace cuvil::codegen
