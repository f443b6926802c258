#!/usr/bin/env python3
"""ONNX Runtime's greedy decoding loop over the KV-cache decoders, as the tests' reference.

Run from the repository root after export_decoders.py (needs onnxruntime):

    .venv/bin/python testdata/scripts/kv_greedy_reference.py

For each of testdata/models/kv/{gpt2_kv,llama_kv}.onnx: prefill the prompt (prompt.npy) with
empty pasts, then feed each step's presents back as the next step's pasts and the argmax of
the last position's logits as the next token; attention_mask is all ones over past + seq and
position_ids (when the model has them) run from the cache length. Writes
testdata/models/kv/<model>.tokens.txt: the NEW_TOKENS generated ids on one line. Also for
testdata/models/gpt2_tiny_past.onnx (export_gpt2.py; its attention becomes cuvil::Attention,
which takes the cache's Concat in), written as kv/gpt2_tiny_past.tokens.txt.
"""

import os

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
KV = os.path.normpath(os.path.join(HERE, "..", "models", "kv"))
NEW_TOKENS = 16


def greedy(path, prompt, new_tokens, threads=1):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    pasts = {}
    for i in sess.get_inputs():
        if i.name.startswith("past_"):
            pasts[i.name] = np.zeros((prompt.shape[0], i.shape[1], 0, i.shape[3]), np.float32)
    outs = [o.name for o in sess.get_outputs()]
    ids, length, tokens = prompt, 0, []
    for _ in range(new_tokens):
        feed = dict(pasts)
        feed["input_ids"] = ids
        feed["attention_mask"] = np.ones((ids.shape[0], length + ids.shape[1]), np.int64)
        if "position_ids" in names:
            feed["position_ids"] = np.arange(length, length + ids.shape[1], dtype=np.int64)[None].repeat(ids.shape[0], 0)
        res = dict(zip(outs, sess.run(outs, feed)))
        length += ids.shape[1]
        nxt = int(np.argmax(res["logits"][0, -1]))
        tokens.append(nxt)
        ids = np.array([[nxt]], np.int64)
        for n in pasts:
            pasts[n] = res[n.replace("past_", "present_")]
    return tokens


def main():
    prompt = np.load(os.path.join(KV, "prompt.npy"))
    for name in ("gpt2_kv", "llama_kv", "gpt2_tiny_past"):
        path = os.path.join(KV, name + ".onnx")
        if not os.path.exists(path):
            path = os.path.join(KV, "..", name + ".onnx")
        tokens = greedy(path, prompt, NEW_TOKENS)
        with open(os.path.join(KV, name + ".tokens.txt"), "w") as f:
            f.write(" ".join(str(t) for t in tokens) + "\n")
        print(name, tokens)


if __name__ == "__main__":
    main()
