#!/usr/bin/env python3
"""Write ONNX Runtime reference inputs and outputs for the test models.

Run from the repository root with a python that has onnxruntime and numpy (the project's
venv, see scripts/make_venv.sh):

    .venv/bin/python testdata/scripts/make_references.py [MODEL...]

For each model in MODELS (or only those named) it writes deterministic inputs (numpy
default_rng seeded per model) and the outputs ONNX Runtime computes for them, as
testdata/models/refs/<model>/<name>.npy, one file per graph input and output, named after it.
tests/model_references_test.cpp (suite ModelReferences) runs cuvil on the same inputs and
compares.

The reference is ORT with graph optimisations disabled (ORT_DISABLE_ALL: plain per-node
kernels, no fusions, so it is independent of the rewrites the compiler is tested for); the
script also runs ORT with every optimisation on and fails if the two disagree by more than
the test's tolerance. Float inputs are low-entropy (multiples of 1/8) so the files compress
in git. Text models: batch 2, seq 7; where the model has an attention mask, batch row 1 has
masked positions. Images: batch 1.

gpt2_tiny_past (a decode step with a KV cache) gets a real cache: its past key/values are the
presents ORT computes running the same model on the 6-token prefix with an empty past, and
the script checks that the decode step's logits equal gpt2_tiny's last-position logits on the
full 7 tokens.
"""

import os
import sys

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_DIR = os.path.normpath(os.path.join(HERE, "..", "models"))
REFS_DIR = os.path.join(MODELS_DIR, "refs")

RTOL = 1e-4
ATOL = 1e-4


def session(model, level):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(os.path.join(MODELS_DIR, model + ".onnx"), opts,
                                providers=["CPUExecutionProvider"])


def run(model, feeds):
    """ORT_DISABLE_ALL outputs by name, checked against ORT_ENABLE_ALL."""
    plain = session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    names = [o.name for o in plain.get_outputs()]
    want = dict(zip(names, plain.run(None, feeds)))
    opt = session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    got = dict(zip(names, opt.run(None, feeds)))
    for name in names:
        w, g = want[name], got[name]
        assert w.shape == g.shape, (model, name, w.shape, g.shape)
        assert np.isfinite(w).all(), (model, name, "non-finite reference")
        diff = np.abs(w.astype(np.float64) - g.astype(np.float64))
        worst = float(diff.max()) if diff.size else 0.0
        ok = np.allclose(g, w, rtol=RTOL, atol=ATOL)
        print(f"   {name}: {list(w.shape)} {w.dtype}, |x| <= {float(np.abs(w).max()):.3g}, "
              f"ORT_ENABLE_ALL vs ORT_DISABLE_ALL max diff {worst:.3g}")
        assert ok, (model, name, worst)
    return want


def token_ids(rng, batch, seq, vocab=512):
    return rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)


def image(rng, shape):
    # Multiples of 1/8 in [-2, 2]: exact in float32 and few distinct bit patterns.
    return (rng.integers(-16, 17, size=shape) / 8.0).astype(np.float32)


def bert_inputs(rng):
    mask = np.ones((2, 7), dtype=np.int64)
    mask[1, 5:] = 0  # right padding
    types = np.zeros((2, 7), dtype=np.int64)
    types[:, 4:] = 1
    return {"input_ids": token_ids(rng, 2, 7), "attention_mask": mask, "token_type_ids": types}


def gpt2_mask():
    mask = np.ones((2, 7), dtype=np.int64)
    mask[1, :2] = 0  # left padding, as when batching prompts for generation
    return mask


def gpt2_inputs(rng):
    return {"input_ids": token_ids(rng, 2, 7), "attention_mask": gpt2_mask()}


def gpt2_past_inputs(rng):
    ids = token_ids(np.random.default_rng(seed_of("gpt2_tiny")), 2, 7)  # gpt2_tiny's tokens
    mask = gpt2_mask()
    prefix = {"input_ids": ids[:, :6], "attention_mask": mask[:, :6]}
    empty = np.zeros((2, 4, 0, 32), dtype=np.float32)
    for i in range(2):
        prefix[f"past_key_{i}"] = empty
        prefix[f"past_value_{i}"] = empty
    presents = session("gpt2_tiny_past", ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    names = [o.name for o in presents.get_outputs()]
    cache = dict(zip(names, presents.run(None, prefix)))
    feeds = {"input_ids": ids[:, 6:], "attention_mask": mask}
    for i in range(2):
        feeds[f"past_key_{i}"] = cache[f"present_key_{i}"]
        feeds[f"past_value_{i}"] = cache[f"present_value_{i}"]
    return feeds


def check_past_step(outputs):
    full = session("gpt2_tiny", ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    rng = np.random.default_rng(seed_of("gpt2_tiny"))
    (logits,) = full.run(None, gpt2_inputs(rng))
    diff = float(np.abs(outputs["logits"][:, 0] - logits[:, 6]).max())
    print(f"   decode step vs gpt2_tiny's last position: max diff {diff:.3g}")
    assert diff < ATOL, diff


# model -> function(rng) -> feeds. One entry per model with references.
MODELS = {
    "bert_tiny": bert_inputs,
    "bert_tiny_opset14": bert_inputs,
    "bert_tiny_opset17": bert_inputs,
    "gpt2_tiny": gpt2_inputs,
    "gpt2_tiny_past": gpt2_past_inputs,
    "llama_tiny": lambda rng: {"input_ids": token_ids(rng, 2, 7)},
    "resnet18": lambda rng: {"input": image(rng, (1, 3, 224, 224))},
    "mobilenet_v2_tiny": lambda rng: {"input": image(rng, (1, 3, 96, 96))},
}

CHECKS = {"gpt2_tiny_past": check_past_step}


def seed_of(model):
    return sum(model.encode()) * 7919


def save(model, tensors):
    d = os.path.join(REFS_DIR, model)
    os.makedirs(d, exist_ok=True)
    for name, t in tensors.items():
        np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(t))


def main(argv):
    names = argv or list(MODELS)
    for model in names:
        if model not in MODELS:
            sys.exit(f"make_references.py: unknown model '{model}' (known: {', '.join(MODELS)})")
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}")
    for model in names:
        print(f"== {model}")
        feeds = MODELS[model](np.random.default_rng(seed_of(model)))
        outputs = run(model, feeds)
        if model in CHECKS:
            CHECKS[model](outputs)
        overlap = set(feeds) & set(outputs)
        assert not overlap, (model, overlap)
        d = os.path.join(REFS_DIR, model)
        if os.path.isdir(d):
            for f in os.listdir(d):
                os.remove(os.path.join(d, f))
        save(model, feeds)
        save(model, outputs)


if __name__ == "__main__":
    main(sys.argv[1:])
