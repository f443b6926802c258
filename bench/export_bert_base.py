#!/usr/bin/python3
"""Export a BERT-base-sized encoder (12 layers, hidden 768, 12 heads, intermediate 3072, vocab
30522, 512 positions; about 418 MB of float32 weights) for the compile-time benchmark
(bench/compile_time.sh). Same module code as testdata/scripts/export_bert.py (HF BertModel
structure), random normal weights (nothing here goes into git).

    /usr/bin/python3 bench/export_bert_base.py OUT.onnx [--opset 14]
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "scripts"))

import torch  # noqa: E402

import export_bert  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--opset", type=int, default=14)
    a = ap.parse_args()
    cfg = export_bert.Config()
    cfg.vocab_size, cfg.num_hidden_layers, cfg.intermediate_size = 30522, 12, 3072
    cfg.max_position_embeddings = 512
    torch.manual_seed(0)
    model = export_bert.TinyBert(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    batch, seq = 1, 16
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    types = torch.zeros(batch, seq, dtype=torch.int64)
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(model, (ids, mask, types), a.out,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                    "last_hidden_state": axes, "pooler_output": {0: "batch"}},
                      opset_version=a.opset, do_constant_folding=True)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
