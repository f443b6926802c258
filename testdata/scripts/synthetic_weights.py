"""Deterministic, low-entropy synthetic weights for the test-model export scripts.

Shared by export_bert.py and export_resnet18.py (not meant to be run directly).

Why synthetic: the exported .onnx files are checked into git and used only as
compiler golden-test inputs.  Real (or random float) weights do not compress,
a float32 resnet18 is ~46 MB.  Instead every value is a small integer from
{-2,-1,0,1,2} times a power-of-two scale chosen per tensor, so each float has
very few distinct bit patterns (zlib gets ~8x).  That alone is enough for the
tiny BERT (~2.6 MB compressed) but not for resnet18 (~6.2 MB), so with
tile=True large tensors are built by tiling a small 2-D block so that zlib's
LZ77 finds long back-references (resnet18 -> ~0.5 MB).

Tiling scheme for a tensor viewed as [rows, cols] (rows = dim 0):
    W[r, c] = block[r % ROW_PERIOD, c % COL_PERIOD]
with ROW_PERIOD = 251 and COL_PERIOD = 67 (primes, coprime to 64/768/etc. so
neighbouring heads / channels / kernel taps do not get identical weights).
The 2-D tiling (rather than tiling the flat buffer) keeps the tensor
compressible after the exporter transposes it (MatMul weights of nn.Linear on
3-D inputs are stored transposed after constant folding) or scales its rows
(BatchNorm folded into Conv).

Rows of the tiled block sum to zero (see zero_sum_rows) so that tiling does
not amplify the DC component of each output channel.

Everything is derived from a fixed seed and the parameter's name, so the
output is reproducible bit-for-bit.
"""

import math
import zlib

import torch

ROW_PERIOD = 251
COL_PERIOD = 67
# Tensors with at most this many elements are filled without tiling.
SMALL_NUMEL = 8192
BASE_SEED = 20240601


def generator_for(name: str, seed: int = BASE_SEED) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed((seed * 1000003 + zlib.crc32(name.encode())) & 0x7FFFFFFFFFFFFFFF)
    return g


def pow2_scale(target: float) -> float:
    """Nearest power of two (in log space) to `target`; exact in float32."""
    return 2.0 ** round(math.log2(target))


def small_ints(shape, gen, lo=-2, hi=2) -> torch.Tensor:
    return torch.randint(lo, hi + 1, tuple(shape), generator=gen).to(torch.float32)


def zero_sum_rows(rows, cols, gen, lo, hi) -> torch.Tensor:
    """[rows, cols] small ints whose every row sums to exactly zero.

    A tiled row repeats its block row cols/COL_PERIOD times, so any non-zero
    row sum would be amplified by the tiling and give every output channel a
    large DC response to non-negative (post-ReLU) inputs; stacked over many
    layers the activations then explode.  Each row is built as a random half,
    the negation of a random permutation of that half, and a 0 if cols is odd,
    then shuffled.
    """
    half = cols // 2
    out = torch.empty(rows, cols)
    for r in range(rows):
        a = small_ints((half,), gen, lo, hi)
        if half and not a.any():
            a[0] = 1.0
        b = -a[torch.randperm(half, generator=gen)]
        row = torch.cat([a, b, torch.zeros(cols - 2 * half)])
        out[r] = row[torch.randperm(cols, generator=gen)]
    return out


def low_entropy(shape, name: str, scale: float, lo=-2, hi=2, tile=True) -> torch.Tensor:
    """Values in {lo..hi} * scale; tiled 2-D block for large tensors if `tile`."""
    gen = generator_for(name)
    shape = tuple(shape)
    numel = 1
    for d in shape:
        numel *= d
    if not tile or numel <= SMALL_NUMEL or len(shape) < 2:
        return small_ints(shape, gen, lo, hi) * scale
    rows = shape[0]
    cols = numel // rows
    rp = min(rows, ROW_PERIOD)
    cp = min(cols, COL_PERIOD)
    block = zero_sum_rows(rp, cp, gen, lo, hi) if lo == -hi else small_ints((rp, cp), gen, lo, hi)
    reps_r = -(-rows // rp)
    reps_c = -(-cols // cp)
    full = block.repeat(reps_r, reps_c)[:rows, :cols]
    return (full * scale).reshape(shape).contiguous()


def choice(shape, name: str, values) -> torch.Tensor:
    """Each element drawn uniformly from the given list of values."""
    gen = generator_for(name)
    vals = torch.tensor(values, dtype=torch.float32)
    idx = torch.randint(0, len(vals), tuple(shape), generator=gen)
    return vals[idx]


def bn_var_for_std(std: float, eps: float) -> float:
    """running_var such that float32(var + eps) == std**2 exactly, so the
    exporter's Conv+BN fusion (scale = gamma / sqrt(var + eps)) multiplies the
    conv weights by an exact power of two when std and gamma are powers of 2."""
    target = torch.tensor([std * std], dtype=torch.float32)
    v = torch.tensor([std * std - eps], dtype=torch.float32)
    for _ in range(64):
        s = v + eps
        if torch.equal(s, target):
            break
        v = torch.nextafter(v, torch.tensor([math.inf]) if (s < target).item() else torch.tensor([-math.inf]))
    assert torch.equal(torch.sqrt(v + eps), torch.tensor([std], dtype=torch.float32)), (std, v)
    return v.item()


def zlib_size(path: str, level: int = 6) -> int:
    with open(path, "rb") as f:
        return len(zlib.compress(f.read(), level))


def op_histogram(model) -> dict:
    hist = {}
    for n in model.graph.node:
        hist[n.op_type] = hist.get(n.op_type, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def report(path: str, check_dims) -> None:
    """onnx.checker + shape inference; print sizes, op histogram, output shapes."""
    import os

    import onnx

    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)

    def dims(vi):
        return [d.dim_param if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]

    print(f"== {path}")
    print(f"   opset: {[ (o.domain or 'ai.onnx', o.version) for o in model.opset_import ]}")
    print(f"   producer: {model.producer_name} {model.producer_version}, ir_version {model.ir_version}")
    print(f"   size: {os.path.getsize(path)} bytes raw, {zlib_size(path)} bytes zlib(6)")
    for vi in inferred.graph.input:
        print(f"   input  {vi.name}: {onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type)} {dims(vi)}")
    for vi in inferred.graph.output:
        print(f"   output {vi.name}: {onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type)} {dims(vi)}")
    print(f"   initializers: {len(model.graph.initializer)}, nodes: {len(model.graph.node)}")
    print(f"   ops: {op_histogram(model)}")
    for name, want in check_dims.items():
        vi = [v for v in list(inferred.graph.input) + list(inferred.graph.output) if v.name == name]
        assert vi, name
        got = dims(vi[0])
        assert got == want, (name, got, want)
