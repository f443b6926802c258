"""Exports testdata/models/vad_stream.onnx: a small streaming voice-activity model shaped like
Silero VAD as it is published, scripted with torch.jit.script so that its Python `if` on the
sample rate survives into ONNX as an If node. Inputs: `input` [batch, samples] float32 audio,
`state` [2, batch, 128] float32 (LSTM h and c), `sr` int64 scalar (16000 or 8000). Outputs:
`output` [batch, 1] speech probability, `stateN` [2, batch, 128] the state to feed back.
Inside: the 16 kHz branch frames the chunk with a Conv1d of 64 taps, stride 32; the 8 kHz
branch with 32 taps, stride 16 (so the If's two branches produce different frame counts);
then ReLU, mean over frames, an LSTM cell (hidden 128), a Linear and a sigmoid.

The weights are synthetic (small integers times a power of two, synthetic_weights.py), not a
trained model. With --reference (needs onnxruntime) it also writes, under
testdata/models/vad/, a stream of 10 chunks per sample rate and ONNX Runtime's outputs with the
state fed back from one chunk to the next, stacked along a new first axis: <sr>_chunks.npy
[10, batch, samples], <sr>_probs.npy [10, batch, 1], <sr>_states.npy [10, 2, batch, 128] (the
state after each chunk; the stream starts from zeros), which tests/vad_stream_test.cpp compares
cuvil against.

  /usr/bin/python3 testdata/scripts/export_vad.py                           # Debian's torch 1.13
  .venv/bin/python testdata/scripts/export_vad.py --reference   # needs onnxruntime
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")
MODEL = os.path.join(MODELS, "vad_stream.onnx")
REFS = os.path.join(MODELS, "vad")
CHUNKS = 10
BATCH = 2
# Samples per chunk at each rate, as Silero VAD takes them.
CHUNK_SAMPLES = {16000: 512, 8000: 256}


def export():
    import torch
    from torch import nn

    sys.path.insert(0, HERE)
    from synthetic_weights import low_entropy, pow2_scale

    class StreamingVad(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc16 = nn.Conv1d(1, 16, kernel_size=64, stride=32)
            self.enc8 = nn.Conv1d(1, 16, kernel_size=32, stride=16)
            self.lstm = nn.LSTMCell(16, 128)
            self.out = nn.Linear(128, 1)

        def forward(self, x, state, sr):
            if sr == 16000:
                feats = self.enc16(x.unsqueeze(1))
            else:
                feats = self.enc8(x.unsqueeze(1))
            feats = torch.relu(feats).mean(dim=2)
            h, c = self.lstm(feats, (state[0], state[1]))
            prob = torch.sigmoid(self.out(h))
            return prob, torch.stack([h, c])

    model = StreamingVad().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[1] * (p.shape[2] if p.dim() == 3 else 1) if p.dim() > 1 else 16
            p.copy_(low_entropy(tuple(p.shape), name, pow2_scale(1.0 / fan_in ** 0.5)))
    scripted = torch.jit.script(model)
    x = torch.zeros(BATCH, 512)
    state = torch.zeros(2, BATCH, 128)
    sr = torch.tensor(16000, dtype=torch.int64)
    torch.onnx.export(scripted, (x, state, sr), MODEL, input_names=["input", "state", "sr"],
                      output_names=["output", "stateN"],
                      dynamic_axes={"input": {0: "batch", 1: "samples"}, "state": {1: "batch"},
                                    "output": {0: "batch"}, "stateN": {1: "batch"}},
                      opset_version=16)


def reference():
    import onnxruntime as ort

    os.makedirs(REFS, exist_ok=True)
    session = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(16000)
    for sr, samples in CHUNK_SAMPLES.items():
        state = np.zeros((2, BATCH, 128), np.float32)
        t = np.arange(CHUNKS * samples, dtype=np.float32) / sr
        # A tone that fades in and out over the stream, plus noise: the state matters.
        audio = (np.sin(2 * np.pi * 440 * t) * np.sin(np.pi * t / t[-1]) * 2.0)[None, :] \
            + rng.standard_normal((BATCH, CHUNKS * samples)).astype(np.float32) * 0.3
        audio = audio.astype(np.float32)
        chunks, probs, states = [], [], []
        for i in range(CHUNKS):
            chunk = np.ascontiguousarray(audio[:, i * samples:(i + 1) * samples])
            prob, state = session.run(None, {"input": chunk, "state": state,
                                             "sr": np.array(sr, np.int64)})
            chunks.append(chunk)
            probs.append(prob)
            states.append(state)
        np.save(os.path.join(REFS, f"{sr}_chunks.npy"), np.stack(chunks))
        np.save(os.path.join(REFS, f"{sr}_probs.npy"), np.stack(probs))
        np.save(os.path.join(REFS, f"{sr}_states.npy"), np.stack(states))


if __name__ == "__main__":
    if "--reference" in sys.argv:
        reference()
    else:
        export()
