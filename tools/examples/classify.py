#!/usr/bin/env python3
"""Classifies the bundled Fashion-MNIST samples with vitk's Python module: first from their
paths (vitk reads the files), then from one numpy array holding them all (read with Pillow).

    PYTHONPATH=build/python python3 tools/examples/classify.py [MODEL [IMAGE...]]
"""

import sys
from pathlib import Path

import numpy as np
from PIL import Image

import vitk

root = Path(__file__).resolve().parents[2]
model = sys.argv[1] if len(sys.argv) > 1 else root / "vit" / "models" / "fmnist-vit.h5"
paths = sys.argv[2:] or sorted((root / "datasets" / "samples").glob("*.png"))

clf = vitk.Classifier(model, threads=2, top_k=3)
height, width = clf.image_size
print(f"{Path(model).name}: {len(clf.classes)} classes, {height}x{width} input, {clf.precision}")

# From files: one list per image of (label, probability), most probable first.
for path, top in zip(paths, clf.classify(paths)):
    print(f"{Path(path).name}: " + ", ".join(f"{label} {p:.3f}" for label, p in top))

# From memory: a uint8 array [N, H, W] of grey images (or [N, H, W, 3] of RGB ones).
images = np.stack([np.asarray(Image.open(path).convert("L")) for path in paths])
top1 = [top[0][0] for top in clf.classify(images, top_k=1)]
logits = clf.logits(images)  # float32 [N, classes]
assert top1 == [clf.classes[i] for i in logits.argmax(axis=1)]
print(f"array {list(images.shape)}: " + ", ".join(top1))
