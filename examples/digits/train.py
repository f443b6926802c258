#!/usr/bin/env python3
"""Train a small CNN on sklearn's 8x8 digits dataset and export it to ONNX.

Deterministic: fixed seeds, one CPU thread, torch deterministic algorithms.
Run from anywhere:  /usr/bin/python3 examples/digits/train.py

Writes, next to this script:
  digits.onnx        the trained model (opset 13, input `image` [batch,1,8,8]
                     float32 in [0,1], output `logits` [batch,10])
  sample.npy         one test image, float32 [1,1,8,8]
  sample_label.txt   its true label
  batch.npy          the first 64 test images, float32 [64,1,8,8]
  batch_labels.npy   their labels, int64 [64]
"""
import os
import random

import numpy as np
import torch
from torch import nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 0
EPOCHS = 30
BATCH = 32
LR = 1e-3
HERE = os.path.dirname(os.path.abspath(__file__))


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16x4x4
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32x2x2
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main():
    seed_everything(SEED)
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # [N,1,8,8]
    labels = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        images, labels, test_size=0.2, random_state=SEED, stratify=labels)
    x_tr, x_te = torch.from_numpy(x_tr), torch.from_numpy(x_te)
    y_tr, y_te = torch.from_numpy(y_tr), torch.from_numpy(y_te)
    print(f"train: {len(y_tr)} images, test: {len(y_te)} images")

    model = DigitsCNN()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(SEED)
    for epoch in range(1, EPOCHS + 1):
        model.train()
        perm = torch.randperm(len(y_tr), generator=gen)
        total = 0.0
        for i in range(0, len(perm), BATCH):
            idx = perm[i:i + BATCH]
            opt.zero_grad()
            loss = loss_fn(model(x_tr[idx]), y_tr[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        if epoch % 5 == 0 or epoch == EPOCHS:
            print(f"epoch {epoch:2d}  loss {total / len(y_tr):.4f}  "
                  f"train acc {accuracy(model, x_tr, y_tr):.4f}  "
                  f"test acc {accuracy(model, x_te, y_te):.4f}")

    train_acc = accuracy(model, x_tr, y_tr)
    test_acc = accuracy(model, x_te, y_te)
    print(f"final train accuracy: {train_acc * 100:.2f}%")
    print(f"final test accuracy:  {test_acc * 100:.2f}% ({len(y_te)} held-out images)")
    assert test_acc > 0.95, "test accuracy below 95%"

    model.eval()
    onnx_path = os.path.join(HERE, "digits.onnx")
    torch.onnx.export(
        model, x_te[:1], onnx_path, opset_version=13,
        input_names=["image"], output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
        do_constant_folding=True)
    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path)} bytes)")

    np.save(os.path.join(HERE, "sample.npy"), x_te[:1].numpy())
    with open(os.path.join(HERE, "sample_label.txt"), "w") as f:
        f.write(f"{int(y_te[0])}\n")
    np.save(os.path.join(HERE, "batch.npy"), x_te[:64].numpy())
    np.save(os.path.join(HERE, "batch_labels.npy"), y_te[:64].numpy())
    print(f"sample label: {int(y_te[0])}; batch of 64: "
          f"accuracy {accuracy(model, x_te[:64], y_te[:64]) * 100:.2f}%")


if __name__ == "__main__":
    main()
