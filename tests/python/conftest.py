"""Shared fixtures of the Python module's tests: the `vitk` executable of the same build (the
reference every Python result is checked against), the bundled models, and small models and
images made once per session with that executable.

ctest sets PYTHONPATH (build/python), VITK_BINARY and VITK_SOURCE_DIR; by hand:

    PYTHONPATH=build/python VITK_BINARY=build/vitk /usr/bin/python3 -m pytest -q \
        -p no:cacheprovider tests/python
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("VITK_SOURCE_DIR", Path(__file__).resolve().parents[2]))
FMNIST = SOURCE_DIR / "vit" / "models" / "fmnist-vit.h5"
SCENES_CAPTION = SOURCE_DIR / "vit" / "models" / "scenes-caption.h5"
SAMPLES = sorted((SOURCE_DIR / "datasets" / "samples").glob("*.png"))
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

# Probabilities printed by `vitk classify --json` have 8 significant digits.
PROBABILITY_TOLERANCE = 1e-6


def vitk_binary():
    binary = os.environ.get("VITK_BINARY")
    if not binary:
        pytest.fail("VITK_BINARY is not set: the path of the `vitk` executable of this build")
    return os.path.abspath(binary)


def run_vitk(*args, cwd=None, check=True):
    """Runs the `vitk` executable; returns the CompletedProcess (text)."""
    words = [vitk_binary(), *map(str, args)]
    done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(words)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def run_python(code, cwd=None, timeout=120):
    """Runs code in a fresh interpreter with this one's environment (PYTHONPATH included)."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def cli_classify(model, paths, top_k=5, precision=None):
    """`vitk classify --json` of paths: {path: entry}."""
    args = ["classify", "--model", model, "--json", "--top-k", top_k, "--threads", 2]
    if precision:
        args += ["--precision", precision]
    return json.loads(run_vitk(*args, *paths).stdout)


@pytest.fixture(scope="session")
def samples():
    assert len(SAMPLES) >= 5, f"the bundled samples are missing from {SOURCE_DIR}"
    return SAMPLES


@pytest.fixture(scope="session")
def fmnist():
    return FMNIST


@pytest.fixture(scope="session")
def int8_model(tmp_path_factory):
    """The bundled classifier quantised by `vitk quantize`."""
    out = tmp_path_factory.mktemp("int8") / "fmnist-int8.h5"
    run_vitk("quantize", FMNIST, "--out", out)
    return out


@pytest.fixture(scope="session")
def classifier():
    import vitk

    return vitk.Classifier(FMNIST, precision="f32", threads=2)


@pytest.fixture(scope="session")
def mt_model(tmp_path_factory):
    """(checkpoint, test sentences): a tiny translation model trained for 60 steps (about a
    second) on the copy task over made-up words, enough for its translations to differ from
    sentence to sentence and between greedy and beam search."""
    words = ("kalo mine suta ripo dena lomi neka tari pode sumi kane lori mepo tade nilo "
             "resa").split()
    rng = random.Random(1)

    def sentences(n):
        return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(n)]

    folder = tmp_path_factory.mktemp("mt")
    for name, count in (("train.tsv", 40), ("valid.tsv", 8)):
        (folder / name).write_text("".join(f"{s}\t{s}\n" for s in sentences(count)))
    run_vitk("mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "run",
             "--max-steps", 60, "--epochs", 1000, "--model.d_model", 32, "--model.heads", 2,
             "--model.d_ff", 64, "--model.layers", 1, "--model.decoder_layers", 1,
             "--model.dropout", 0, "--model.max_length", 24, "--vocab-size", 40,
             "--max-tokens", 200, "--warmup-steps", 20, "--threads", 2, cwd=folder)
    # An empty line and one longer than the model's 23 source subwords among them.
    test = sentences(10) + ["", " ".join(words * 2)]
    return folder / "run" / "last.h5", test


@pytest.fixture(scope="session")
def text_model(tmp_path_factory):
    """(checkpoint, test sentences): a tiny text classifier trained for a few epochs (about a
    second) to tell whether the made-up word "zq" occurs in a sentence."""
    words = ("kalo mine suta ripo dena lomi neka tari pode sumi kane lori mepo tade nilo "
             "resa").split()
    rng = random.Random(2)

    def labelled(n):
        rows = []
        for _ in range(n):
            s = [rng.choice(words) for _ in range(rng.randint(2, 6))]
            marked = rng.random() < 0.5
            if marked:
                s.insert(rng.randint(0, len(s)), "zq")
            rows.append((" ".join(s), "marked" if marked else "plain"))
        return rows

    folder = tmp_path_factory.mktemp("text")
    for name, count in (("train.tsv", 300), ("valid.tsv", 40)):
        (folder / name).write_text("".join(f"{s}\t{l}\n" for s, l in labelled(count)))
    run_vitk("text-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "run",
             "--epochs", 6, "--batch-size", 16, "--lr", 0.003, "--model.d_model", 32,
             "--model.heads", 2, "--model.d_ff", 64, "--model.layers", 1, "--model.dropout", 0,
             "--model.max_length", 24, "--vocab-size", 40, "--threads", 2, cwd=folder)
    # One longer than the model's 23 subwords among them.
    test = [s for s, _ in labelled(12)] + [" ".join(words * 2)]
    return folder / "run" / "best.h5", test


@pytest.fixture(scope="session")
def scene_images(tmp_path_factory):
    """Four generated scenes (84x84 grey PNGs) for the bundled captioner."""
    if not (FASHION_MNIST / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"Fashion-MNIST is not in {FASHION_MNIST}")
    out = tmp_path_factory.mktemp("scenes") / "scenes"
    run_vitk("make-scenes", "--out", out, "--train", 0, "--val", 0, "--test", 4,
             "--captions-per-image", 1, "--seed", 3)
    images = sorted((out / "images" / "test").glob("*.png"))
    assert len(images) == 4
    return images
