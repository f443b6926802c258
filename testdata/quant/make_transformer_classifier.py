#!/usr/bin/env python3
"""Trains and exports the small transformer classifier of the W8A8 accuracy test
(QuantAccuracy.TransformerLosesAtMostOnePointWithEachMethod in tests/quant_qdq_test.cpp).

The data is the 8x8 digits of testdata/quant/digits/ (scikit-learn's 1797 images, written by
make_digits_data.py; this script reads its eval_pixels.npy / eval_labels.npy, so it needs
nothing else). Each image is a sequence of 8 tokens, its 8 rows, each token 8 pixels / 16:

  rows [batch, 8, 8] -> Linear(8, 32) + learned positions [8, 32]
    -> 2 encoder layers (pre-norm: x + MHA(LN(x)), 4 heads of 8; x + MLP(LN(x)), 32 -> 64 GELU -> 32)
    -> LayerNorm -> mean over the 8 tokens -> Linear(32, 10) -> logits [batch, 10]

The attention is written out (Linear q/k/v, Reshape, Transpose, MatMul, Softmax, MatMul) so the
export is plain ONNX ops, not torch's fused encoder fast path.

Split: images 0..1399 train; images 1400..1796 (397 images, the last ones of the file, so
mostly writers the model has not seen) are the held-out set. Calibration: 128 training images,
every 11th from image 0 (0, 11, ..., 1397), as 16 samples of batch 8 (images 0..7 of them the
first sample). Batches, not single images, because EMA calibration averages the per-sample
range: the average range of one digit is narrower than the range over the set and clips (with
128 samples of batch 1, EMA lost 1.5 points on the held-out set; every other method sees the
same 128 images either way).

Writes (about 150 KB in all):
  transformer/classifier.onnx    opset 14, input 'rows' f32 [batch, 8, 8], output 'logits' f32 [batch, 10]
  transformer/calib/rows.npy     f32 [16, 8, 8, 8]: the calibration images (16 samples of batch 8)
  transformer/heldout_rows.npy   uint8 [397, 64]: the held-out images, raw pixels 0..16 (the test divides by 16)
  transformer/heldout_labels.npy uint8 [397]: their labels

Deterministic (seeds, one thread, 60 epochs of seeded shuffled batches; the ONNX file is the same
bytes on a rerun); takes about a minute of CPU. Prints the fp32 accuracy on the training and held-out parts. Usage (Debian's
python with torch 1.13, numpy, onnx):
  /usr/bin/python3 testdata/quant/make_transformer_classifier.py
"""
import os

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "transformer")
N_TRAIN = 1400
D, HEADS, FF, LAYERS = 32, 4, 64, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.q = nn.Linear(D, D)
        self.k = nn.Linear(D, D)
        self.v = nn.Linear(D, D)
        self.o = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, FF)
        self.fc2 = nn.Linear(FF, D)
        self.act = nn.GELU()

    def forward(self, x):
        b, t, _ = x.shape
        h = self.ln1(x)
        hd = D // HEADS

        def heads(y):
            return y.reshape(b, t, HEADS, hd).transpose(1, 2)  # [b, heads, t, hd]

        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        att = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * (1.0 / hd ** 0.5), dim=-1)
        a = torch.matmul(att, v).transpose(1, 2).reshape(b, t, D)
        x = x + self.o(a)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, D)
        self.pos = nn.Parameter(torch.zeros(8, D))
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, 10)

    def forward(self, rows):
        x = self.embed(rows) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(dim=1))


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean()) * 100.0


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    digits = os.path.join(HERE, "digits")
    pixels = np.load(os.path.join(digits, "eval_pixels.npy"))
    labels = np.load(os.path.join(digits, "eval_labels.npy"))
    assert pixels.shape == (1797, 64) and labels.shape == (1797,)
    x = torch.from_numpy(pixels.astype(np.float32).reshape(-1, 8, 8) / 16.0)
    y = torch.from_numpy(labels.astype(np.int64))
    xt, yt, xh, yh = x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]

    model = Classifier()
    nn.init.normal_(model.pos, std=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    epochs, batch = 60, 50
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=epochs * (N_TRAIN // batch))
    gen = torch.Generator().manual_seed(1)
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(N_TRAIN, generator=gen)
        for i in range(0, N_TRAIN, batch):
            idx = perm[i:i + batch]
            loss = nn.functional.cross_entropy(model(xt[idx]), yt[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        if epoch % 10 == 9:
            model.eval()
            print(f"epoch {epoch + 1}: loss {loss.item():.4f} train {accuracy(model, xt, yt):.2f}% "
                  f"held-out {accuracy(model, xh, yh):.2f}%")
    model.eval()
    print(f"fp32 (torch): train {accuracy(model, xt, yt):.2f}%  held-out {accuracy(model, xh, yh):.2f}% "
          f"({len(yh)} images)")

    os.makedirs(os.path.join(OUT, "calib"), exist_ok=True)
    path = os.path.join(OUT, "classifier.onnx")
    torch.onnx.export(model, (xt[:2],), path, input_names=["rows"], output_names=["logits"],
                      dynamic_axes={"rows": {0: "batch"}, "logits": {0: "batch"}}, opset_version=14,
                      do_constant_folding=True)
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    np.save(os.path.join(OUT, "calib", "rows.npy"), xt.numpy()[0:N_TRAIN:11][:128].reshape(16, 8, 8, 8).copy())
    np.save(os.path.join(OUT, "heldout_rows.npy"), pixels[N_TRAIN:].copy())
    np.save(os.path.join(OUT, "heldout_labels.npy"), labels[N_TRAIN:].copy())
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {OUT} ({total} bytes); ops:", sorted({n.op_type for n in m.graph.node}))


if __name__ == "__main__":
    main()
