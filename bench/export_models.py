#!/usr/bin/python3
"""Exports the full-size benchmark models of bench/vs_onnxruntime.py into bench/models/ (not in
git) with Debian's torch 1.13 (system python), random weights:

    /usr/bin/python3 bench/export_models.py [NAME ...]   (default: all)

resnet18, mobilenet_v2 (torchvision, eval mode, [batch, 3, 224, 224]) and bert_base (BERT-base
config of bench/export_bert_base.py, [batch, seq]). The GPT-2-small and LLaMA-style 50M
decoders come from the module definitions in testdata/scripts/ once those exist.
"""
import os
import subprocess
import sys

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models")


def vision(name, ctor):
    torch.manual_seed(0)
    model = ctor(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    path = os.path.join(OUT, name + ".onnx")
    torch.onnx.export(model, x, path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13,
                      do_constant_folding=True)
    print("wrote", path)


def bert_base():
    subprocess.run([sys.executable, os.path.join(HERE, "export_bert_base.py"), os.path.join(OUT, "bert_base.onnx")],
                   check=True)


EXPORTS = {
    "resnet18": lambda: vision("resnet18", torchvision.models.resnet18),
    "mobilenet_v2": lambda: vision("mobilenet_v2", torchvision.models.mobilenet_v2),
    "bert_base": bert_base,
}


def main():
    os.makedirs(OUT, exist_ok=True)
    names = sys.argv[1:] or list(EXPORTS)
    for n in names:
        if n not in EXPORTS:
            sys.exit(f"unknown model '{n}' (known: {', '.join(EXPORTS)})")
        EXPORTS[n]()


if __name__ == "__main__":
    main()
