#!/usr/bin/env python3
"""Greedy decoding with a KV cache: cuvil-run --generate against ONNX Runtime's greedy loop,
side by side in one run (docs/kv_cache.md). Do not trust numbers taken while the machine is
busy (builds, other benchmarks): run it on an idle machine.

    .venv/bin/python bench/decode_vs_onnxruntime.py [--build build] [--threads 1 2]
        [--prompt 32] [--new 64] [--models gpt2_small_kv llama_50m_kv]

Models: bench/models/<name>.onnx with past/present I/O, exported on first use with Debian's
torch 1.13 (/usr/bin/python3 this-script --export NAME) from the decoders of
testdata/scripts/export_decoders.py at full size, random weights:
  gpt2_small_kv  GPT-2 small: 12 layers, 768 wide, 12 heads, vocabulary 50257, 1024 positions
  llama_50m_kv   LLaMA style: 4 layers, 512 wide, 8 query / 2 key-value heads, SwiGLU 1024,
                 vocabulary 32000 (about 40M parameters), rotary, RMSNorm
Each is compiled with cuvilc --dim batch=1 --dim past=0:1024 --dim seq=1:1024 --dim total=1:1024.

Per model and thread count it prints tokens/s and first-token latency of
  cuvil         cuvil-run --generate (the cache stays in the session); "again": the same
                prefill run a second time in that session, its cache reset (no one-time costs)
  ort           ONNX Runtime InferenceSession.run, presents fed back as pasts (numpy copies)
  ort-iobind    ONNX Runtime with IO binding, presents bound as the next step's pasts (no copy
                by the caller)
the ratio cuvil / best ORT, whether the generated ids agree, and the weight-streaming limit:
weight bytes / read bandwidth (numpy sum over a 1 GiB buffer, measured in the same run) as
tokens/s, with each one-token step's share of it.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
MODELS = os.path.join(HERE, "models")
CONFIGS = {
    # name: (HIDDEN, LAYERS, VOCAB, POSITIONS, HEAD_DIM, kind)
    "gpt2_small_kv": (768, 12, 50257, 1024, 64, "gpt2"),
    "llama_50m_kv": (512, 4, 32000, 1024, 64, "llama"),
}
MAX_PAST = 1024


def export(name):
    """Run with /usr/bin/python3 (torch 1.13): the decoders of export_decoders.py, resized."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "testdata", "scripts"))
    import export_decoders as d
    hidden, layers, vocab, positions, head_dim, kind = CONFIGS[name]
    d.HIDDEN, d.LAYERS, d.VOCAB, d.POSITIONS, d.HEAD_DIM = hidden, layers, vocab, positions, head_dim
    torch.manual_seed(0)
    model = (d.Gpt() if kind == "gpt2" else d.Llama()).eval()
    d.init_weights(model, 1)
    os.makedirs(MODELS, exist_ok=True)
    kv_heads = hidden // head_dim if kind == "gpt2" else 2
    d.export(model, os.path.join(MODELS, name + ".onnx"), kv_heads, kind == "llama")


def read_bandwidth():
    import numpy as np
    buf = np.ones(1 << 28, dtype=np.float32)  # 1 GiB
    buf.sum()
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        buf.sum()
        best = max(best, buf.nbytes / (time.perf_counter() - t))
    return best


def ort_greedy(path, prompt, new, threads, iobind):
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    pasts = [n for n in ins if n.startswith("past_")]
    ids, length, tokens = prompt, 0, []
    state = {n: np.zeros((1, ins[n].shape[1], 0, ins[n].shape[3]), np.float32) for n in pasts}
    binding = sess.io_binding() if iobind else None
    start = time.perf_counter()
    first = None
    for step in range(new):
        feed = {"input_ids": ids, "attention_mask": np.ones((1, length + ids.shape[1]), np.int64)}
        if "position_ids" in ins:
            feed["position_ids"] = np.arange(length, length + ids.shape[1], dtype=np.int64)[None]
        if iobind:
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()
            for n, v in feed.items():
                binding.bind_cpu_input(n, v)
            for n in pasts:
                v = state[n]
                if isinstance(v, np.ndarray):
                    binding.bind_cpu_input(n, v)
                else:
                    binding.bind_ortvalue_input(n, v)
            for n in outs:
                binding.bind_output(n, "cpu")
            sess.run_with_iobinding(binding)
            res = dict(zip(outs, binding.get_outputs()))
            logits = res["logits"].numpy()
            for n in pasts:
                state[n] = res[n.replace("past_", "present_")]
        else:
            feed.update(state)
            res = dict(zip(outs, sess.run(outs, feed)))
            logits = res["logits"]
            for n in pasts:
                state[n] = res[n.replace("past_", "present_")]
        length += ids.shape[1]
        nxt = int(np.argmax(logits[0, -1]))
        tokens.append(nxt)
        ids = np.array([[nxt]], np.int64)
        if step == 0:
            first = time.perf_counter() - start
    total = time.perf_counter() - start
    return tokens, (new - 1) / (total - first), first * 1e3


def cuvil_greedy(build, package, prompt_path, new, threads):
    out = subprocess.run([os.path.join(build, "cuvil-run"), package, "--generate", str(new), "--input",
                          "input_ids=" + prompt_path, "--threads", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    tokens = [int(t) for t in re.search(r"^tokens:(.*)$", out, re.M).group(1).split()]
    m = re.search(r"decode: \d+ tokens, ([\d.]+) tokens/s, first token ([\d.]+) ms", out)
    again = float(re.search(r"^prefill again: ([\d.]+) ms", out, re.M).group(1))
    return tokens, float(m.group(1)), float(m.group(2)), again


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--export":
        export(sys.argv[2])
        return
    import numpy as np
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--models", nargs="+", default=list(CONFIGS))
    a = ap.parse_args()
    bandwidth = read_bandwidth()
    print(f"read bandwidth (numpy sum, 1 GiB): {bandwidth / 1e9:.1f} GB/s")
    tmp = tempfile.mkdtemp(prefix="cuvil_decode_")
    for name in a.models:
        path = os.path.join(MODELS, name + ".onnx")
        if not os.path.exists(path):
            subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--export", name], check=True)
        package = os.path.join(tmp, name + ".cuvir")
        subprocess.run([os.path.join(a.build, "cuvilc"), "compile", path, "--dim", "batch=1", "--dim",
                        f"past=0:{MAX_PAST}", "--dim", f"seq=1:{MAX_PAST}", "--dim", f"total=1:{MAX_PAST}",
                        "--kv-cache", "on", "-o", package], check=True)
        vocab = CONFIGS[name][2]
        prompt = np.random.default_rng(0).integers(0, vocab, size=(1, a.prompt), dtype=np.int64)
        prompt_path = os.path.join(tmp, name + "_prompt.npy")
        np.save(prompt_path, prompt)
        import onnx
        weights = sum(np.prod(t.dims) * 4 for t in onnx.load(path, load_external_data=False).graph.initializer)
        limit = bandwidth / weights
        print(f"\n{name}: {weights / 1e6:.1f} MB of weights; weight-streaming limit {limit:.1f} tokens/s")
        for threads in a.threads:
            ct, crate, cfirst, cagain = cuvil_greedy(a.build, package, prompt_path, a.new, threads)
            ot, orate, ofirst = ort_greedy(path, prompt, a.new, threads, False)
            bt, brate, bfirst = ort_greedy(path, prompt, a.new, threads, True)
            best = max(orate, brate)
            print(f"  threads {threads}: cuvil {crate:8.1f} tok/s first {cfirst:7.2f} ms (again {cagain:7.2f}) | ort {orate:8.1f} tok/s "
                  f"first {ofirst:7.2f} ms | ort-iobind {brate:8.1f} tok/s first {bfirst:7.2f} ms | "
                  f"cuvil/best-ort {crate / best:.2f}x | cuvil step at {crate / limit:.0%} of the limit | "
                  f"ids {'agree' if ct == ot == bt else 'DIFFER'}")


if __name__ == "__main__":
    main()
