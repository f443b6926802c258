// CPU interpreter for tile kernels (TileKernel in runtime/program.h). The kernel's domain is
// walked as [rows, cols] tiles (cols = the last dim); each worker thread takes a share of the
// tiles and runs the straight-line body on float32 tile registers in its own scratch memory,
// so the per-instruction dispatch is paid once per tile (thousands of elements), not per
// element. Before any tile runs, every access map is proven in bounds for the bound shapes:
// executing a verified kernel cannot read or write outside its tensors. Tile registers hold
// kTileRegisterElements floats (runtime/program.h); a kernel with a reduction loop runs its
// init section, then the loop section once per chunk of the loop, then the finish section,
// per tile (docs/isa.md "Reduction loop").
#pragma once

#include <vector>

#include "runtime/cpu/thread_pool.h"
#include "runtime/expr_eval.h"
#include "runtime/op_kernel.h"
#include "runtime/program.h"

namespace cuvil::rt {

// `views` holds every tensor of the program; tensors the kernel stores must already have
// storage with the domain's dims. `trace` prints each instruction of the first tile.
// What every executor of tile kernel `k` (this interpreter, the GPU megakernel's bind) proves
// about access map `m` bound to tensor view `v` before touching memory. The first: the view's
// dtype is the program's and a tile can hold it, and it has storage. The second: the elements
// the map reaches from `offset` over `extents` ((extent, stride) per walked axis) lie inside
// the tensor, with every span computed without overflow.
Status check_map_tensor(const Program& program, const TileKernel& k, size_t m, const TensorView& v);
Status check_map_span(const Program& program, const TileKernel& k, size_t m, const TensorView& v, int64_t offset,
                      const std::vector<std::pair<int64_t, int64_t>>& extents);

Status run_tile_kernel(const Program& program, uint32_t kernel_index, ExprEvaluator& eval,
                       std::vector<TensorView>& views, ThreadPool& pool);

// Packs, into the package's weight panel cache (runtime/cpu/ops/packed_weights.h), the panels
// of every Mma b operand in `program`'s tile kernels that is a float32 weight read with a key
// known before any run (constant depth, columns and strides); `weights` is the package's
// weights section. The rest pack on first use. The packing is shared by `pool`'s threads.
// Returns how many operands have cached panels.
size_t prepack_tile_kernel_weights(const Program& program, const uint8_t* weights, ThreadPool& pool);

}  // namespace cuvil::rt
