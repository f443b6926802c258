#!/usr/bin/python3
"""Export torchvision's mobilenet_v2(width_mult=0.5) to ONNX with its BatchNorms kept.

Run from the repository root (Debian's system python, torch 1.13 / torchvision 0.14):

    /usr/bin/python3 testdata/scripts/export_mobilenet_v2.py

Writes testdata/models/mobilenet_v2_tiny.onnx (opset 13): input `input` float32
[batch, 3, 96, 96], output `logits` float32 [batch, 1000].

The architecture is exactly torchvision.models.mobilenet_v2(weights=None, width_mult=0.5)
(Conv + BatchNorm + ReLU6 blocks, depthwise 3x3 convs, inverted residuals, global average
pool, Dropout + Linear classifier). It is exported from eval mode with
training=TrainingMode.PRESERVE, which skips the exporter's eval-mode peephole that folds each
BatchNorm into the preceding Conv, so the file keeps its BatchNormalization nodes (one per
conv, in inference form: one output) for the compiler's own fold-batch-norm pass to remove.
ReLU6 exports as Clip(0, 6); the eval-mode Dropout leaves no node.

The weights are synthetic: deterministic, low-entropy values so the file compresses well in
git. Conv/FC weights are small integers {-2..2} times a per-tensor power of two, tiled from a
251x67 block with zero row sums (see synthetic_weights.py); BatchNorm gamma, beta,
running_mean and running_var are low-entropy too but NOT chosen to make the fold exact (unlike
resnet18), so folding really rescales the conv weights. Not a trained model.
"""

import math
import os
import sys

sys.dont_write_bytecode = True

import torch
import torchvision
from torch import nn

from synthetic_weights import choice, low_entropy, pow2_scale, report

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.normpath(os.path.join(HERE, "..", "models"))


def init_synthetic(model: nn.Module) -> None:
    with torch.no_grad():
        for mod_name, m in model.named_modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.weight[0].numel()
                m.weight.copy_(low_entropy(m.weight.shape, mod_name + ".weight",
                                           pow2_scale(1.0 / math.sqrt(fan_in))))
                assert m.bias is None
            elif isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(choice((n,), mod_name + ".weight", [0.5, 0.75, 1.0, 1.25]))
                m.bias.copy_(low_entropy((n,), mod_name + ".bias", 1.0 / 16))
                m.running_mean.copy_(low_entropy((n,), mod_name + ".running_mean", 1.0 / 16))
                m.running_var.copy_(choice((n,), mod_name + ".running_var", [0.5, 1.0, 1.5, 3.0]))
            elif isinstance(m, nn.Linear):
                fan_in = m.weight.shape[1]
                m.weight.copy_(low_entropy(m.weight.shape, mod_name + ".weight",
                                           pow2_scale(1.0 / math.sqrt(2.0 * fan_in))))
                m.bias.copy_(low_entropy(m.bias.shape, mod_name + ".bias", 1.0 / 64))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torchvision.models.mobilenet_v2(weights=None, width_mult=0.5).eval()
    init_synthetic(model)
    os.makedirs(MODELS, exist_ok=True)
    path = os.path.join(MODELS, "mobilenet_v2_tiny.onnx")

    x = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(0))
    torch.onnx.export(
        model,
        (x,),
        path,
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=13,
        training=torch.onnx.TrainingMode.PRESERVE,
        do_constant_folding=True,
    )
    report(path, {"input": ["batch", 3, 96, 96], "logits": ["batch", 1000]})
    import onnx

    ops = [n.op_type for n in onnx.load(path).graph.node]
    n_bn, n_conv = ops.count("BatchNormalization"), ops.count("Conv")
    print(f"   BatchNormalization nodes: {n_bn}, Conv nodes: {n_conv}")
    assert n_bn == n_conv == 52, (n_bn, n_conv)
    assert not model.training
    with torch.no_grad():
        y = model(x)
    print(f"   sample run: logits mean {y.mean().item():.4f} std {y.std().item():.4f} "
          f"min/max {y.min().item():.4f}/{y.max().item():.4f}, argmax {y.argmax(1).tolist()}")


if __name__ == "__main__":
    main()
