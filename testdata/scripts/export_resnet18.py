#!/usr/bin/python3
"""Export torchvision's resnet18 to ONNX for the compiler's golden tests.

Run from the repository root (Debian's system python, torch 1.13 /
torchvision 0.14):

    /usr/bin/python3 testdata/scripts/export_resnet18.py

Writes testdata/models/resnet18.onnx (opset 13): input `input` float32
[batch, 3, 224, 224], output `logits` float32 [batch, 1000].

The architecture is exactly torchvision.models.resnet18(weights=None), exported
in eval mode (the exporter folds every BatchNorm into the preceding Conv).

The weights are synthetic: deterministic, low-entropy values so the .onnx file
compresses well in git (float32 resnet18 with real weights is ~46 MB and does
not compress).  Conv/FC weights are small integers {-2..2} times a per-tensor
power of two, tiled from a 251x67 block (see synthetic_weights.py); BatchNorm
gamma and sqrt(running_var + eps) are powers of two so the folded Conv weights
stay exact power-of-two multiples of that pattern.  Not a trained model: the
logits are only meaningful as golden reference values.
"""

import math
import os
import sys

sys.dont_write_bytecode = True

import torch
import torchvision
from torch import nn

from synthetic_weights import bn_var_for_std, choice, low_entropy, pow2_scale, report

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.normpath(os.path.join(HERE, "..", "models"))


def init_synthetic(model: nn.Module) -> None:
    with torch.no_grad():
        for mod_name, m in model.named_modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.weight[0].numel()
                # {-2..2} has std sqrt(2): aim for He-ish std sqrt(2 / fan_in).
                m.weight.copy_(low_entropy(m.weight.shape, mod_name + ".weight",
                                           pow2_scale(1.0 / math.sqrt(fan_in))))
                assert m.bias is None
            elif isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                # gamma / sqrt(var + eps) in {1/4, 1/2, 1, 2} -> exact fold.
                m.weight.copy_(choice((n,), mod_name + ".weight", [0.5, 1.0, 1.0]))
                stds = [bn_var_for_std(s, m.eps) for s in (0.5, 1.0, 2.0)]
                m.running_var.copy_(choice((n,), mod_name + ".running_var", stds))
                m.running_mean.copy_(low_entropy((n,), mod_name + ".running_mean", 1.0 / 16))
                m.bias.copy_(low_entropy((n,), mod_name + ".bias", 1.0 / 16))
            elif isinstance(m, nn.Linear):
                fan_in = m.weight.shape[1]
                m.weight.copy_(low_entropy(m.weight.shape, mod_name + ".weight",
                                           pow2_scale(1.0 / math.sqrt(2.0 * fan_in))))
                m.bias.copy_(low_entropy(m.bias.shape, mod_name + ".bias", 1.0 / 64))
        # num_batches_tracked buffers are not used in eval mode / not exported.


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(weights=None).eval()
    init_synthetic(model)
    os.makedirs(MODELS, exist_ok=True)
    path = os.path.join(MODELS, "resnet18.onnx")

    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    torch.onnx.export(
        model,
        (x,),
        path,
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=13,
        do_constant_folding=True,
    )
    report(path, {"input": ["batch", 3, 224, 224], "logits": ["batch", 1000]})
    with torch.no_grad():
        y = model(x)
    print(f"   sample run: logits mean {y.mean().item():.4f} std {y.std().item():.4f} "
          f"min/max {y.min().item():.4f}/{y.max().item():.4f}, argmax {y.argmax(1).tolist()}")


if __name__ == "__main__":
    main()
