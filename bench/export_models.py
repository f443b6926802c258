#!/usr/bin/python3
"""Exports the full-size benchmark models of bench/vs_onnxruntime.py into bench/models/ (not in
git) with Debian's torch 1.13 (system python), random weights:

    /usr/bin/python3 bench/export_models.py [NAME ...]   (default: all)

resnet18, mobilenet_v2 (torchvision, eval mode, [batch, 3, 224, 224]) and bert_base (BERT-base
config of bench/export_bert_base.py, [batch, seq]), gpt2_small (the GPT-2 module of
testdata/scripts/export_gpt2.py at GPT-2-small's size: 12 layers, 768 wide, 12 heads, vocabulary
50257, 1024 positions; inputs input_ids and attention_mask) and llama_50m (the LLaMA module of
testdata/scripts/export_llama.py at hidden 512, 4 layers, 8 heads, SwiGLU 1536, vocabulary
32000: about 50M parameters; input input_ids).
"""
import os
import subprocess
import sys

import torch
import torchvision

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "scripts"))

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


def random_init(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("ln_1.weight") or name.endswith("ln_2.weight"):
                continue
            p.normal_(0.0, 0.02)


def gpt2_small():
    import export_gpt2 as m
    c = m.Config
    c.vocab_size, c.n_positions, c.n_embd, c.n_layer, c.n_head, c.n_inner = 50257, 1024, 768, 12, 12, 3072
    model = m.GPT2LMHeadModel(c()).eval()
    random_init(model)
    path = os.path.join(OUT, "gpt2_small.onnx")
    m.export_plain(model, path)
    print("wrote", path)


def llama_50m():
    import export_llama as m
    c = m.Config
    c.vocab_size, c.hidden_size, c.intermediate_size = 32000, 512, 1536
    c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.max_position_embeddings = 4, 8, 8, 512
    model = m.LlamaForCausalLM(c()).eval()
    random_init(model)
    path = os.path.join(OUT, "llama_50m.onnx")
    ids = torch.randint(0, c.vocab_size, (1, 16))
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": axes, "logits": axes}, opset_version=14, do_constant_folding=True)
    print("wrote", path)


EXPORTS = {
    "resnet18": lambda: vision("resnet18", torchvision.models.resnet18),
    "mobilenet_v2": lambda: vision("mobilenet_v2", torchvision.models.mobilenet_v2),
    "bert_base": bert_base,
    "gpt2_small": gpt2_small,
    "llama_50m": llama_50m,
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
