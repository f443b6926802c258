// The megakernel's GPU entry point (codegen/ptx/megakernel.inc), compiled by clang-19 as CUDA
// device code without any CUDA header or library (CMakeLists.txt, docs/ptx.md):
//   clang-19 -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-path=/nonexistent
//            --cuda-gpu-arch=sm_80 --cuda-feature=+ptx70 -O3 -ffp-contract=off -S
// One block per resident worker; the dynamic shared memory holds the block's ticket header
// and register file (MkParams::smem_floats floats).
#include "codegen/ptx/megakernel_port.h"
#include "codegen/ptx/megakernel.inc"

extern MK_SHARED float cuvil_megakernel_smem[];

MK_GLOBAL void cuvil_megakernel(const MkParams* params) {
  mk::Ctx c;
  c.tid = __nvvm_read_ptx_sreg_tid_x();
  c.threads = __nvvm_read_ptx_sreg_ntid_x();
  c.block = __nvvm_read_ptx_sreg_ctaid_x();
  c.blocks = __nvvm_read_ptx_sreg_nctaid_x();
  c.smem = cuvil_megakernel_smem;
  mk::megakernel_block(c, *params);
}
