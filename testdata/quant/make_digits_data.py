#!/usr/bin/env python3
"""Writes the digits data of the W8A8 tests (tests/quant_accuracy_test.cpp) from scikit-learn's
8x8 digits (sklearn/datasets/data/digits.csv.gz: 1797 rows of 64 pixels 0..16 and a label).

  calib/image.npy     float32 [128, 1, 8, 8]: every 14th image (pixels / 16), the calibration
                      set; a file of the input's own rank is 128 samples of batch 1
  eval_pixels.npy     uint8 [1797, 64]: every image, raw pixels 0..16 (the test divides by 16)
  eval_labels.npy     uint8 [1797]: their labels

All 1797 images are evaluated: examples/digits/train.py's split comes from scikit-learn's
train_test_split, which this script does not need, so the evaluation set includes the
training images; the test compares int8 against fp32 on the same images, which is what
calibration quality is about. Usage:
  /usr/bin/python3 testdata/quant/make_digits_data.py [path/to/digits.csv.gz]
(default: the file inside an installed scikit-learn).
"""
import gzip
import os
import sys

import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits")


def main():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        import sklearn  # only to find the data file
        path = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    pixels, labels = rows[:, :64].astype(np.uint8), rows[:, 64].astype(np.uint8)
    assert pixels.shape == (1797, 64) and pixels.max() <= 16
    os.makedirs(os.path.join(HERE, "calib"), exist_ok=True)
    calib = pixels[::14][:128].astype(np.float32).reshape(-1, 1, 8, 8) / 16.0
    np.save(os.path.join(HERE, "calib", "image.npy"), calib)
    np.save(os.path.join(HERE, "eval_pixels.npy"), pixels)
    np.save(os.path.join(HERE, "eval_labels.npy"), labels)
    print("calib", calib.shape, "eval", pixels.shape)


if __name__ == "__main__":
    main()
