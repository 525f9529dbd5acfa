"""vitk.Classifier against `vitk classify --json`: the same labels and probabilities from paths and
from numpy arrays, at f32 and int8, and logits consistent with them."""

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitk
from conftest import FMNIST, PROBABILITY_TOLERANCE, cli_classify


def load(path):
    """A PNG as the uint8 array Pillow decodes: [H, W] grey or [H, W, C]."""
    with Image.open(path) as image:
        return np.asarray(image)


def assert_same(python_results, cli_entries):
    assert len(python_results) == len(cli_entries)
    for top, entry in zip(python_results, cli_entries):
        assert "error" not in entry, entry
        assert [label for label, _ in top] == entry["labels"]
        np.testing.assert_allclose([p for _, p in top], entry["probabilities"], rtol=0,
                                   atol=PROBABILITY_TOLERANCE)


def cli_entries(model, paths, top_k=5, precision=None):
    by_path = cli_classify(model, paths, top_k=top_k, precision=precision)
    return [by_path[str(p)] for p in paths]


def test_properties(classifier):
    assert classifier.image_size == (28, 28)
    assert classifier.channels == 1
    assert classifier.precision == "f32"
    assert len(classifier.classes) == 10
    assert classifier.classes[9] == "Ankle boot"
    assert "fmnist-vit.h5" in repr(classifier)


@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_paths_equal_the_command(classifier, samples, top_k):
    results = classifier.classify([str(p) for p in samples], top_k=top_k)
    assert all(len(top) == top_k for top in results)
    assert_same(results, cli_entries(FMNIST, samples, top_k=top_k))


def test_arrays_equal_the_command(classifier, samples):
    expected = cli_entries(FMNIST, samples)
    batch = np.stack([load(p) for p in samples])
    assert batch.dtype == np.uint8 and batch.ndim == 3
    assert_same(classifier.classify(batch), expected)
    assert_same(classifier.classify([load(p) for p in samples]), expected)
    assert_same(classifier.classify(batch[..., None]), expected)  # [N, H, W, 1]
    # One image [H, W] is a list of one.
    assert_same(classifier.classify(batch[0]), expected[:1])


def test_int8_equals_the_command(int8_model, samples):
    clf = vitk.Classifier(int8_model, threads=2)
    assert clf.precision == "int8"  # a quantised file's default
    expected = cli_entries(int8_model, samples, precision="int8")
    assert_same(clf.classify(samples), expected)
    assert_same(clf.classify(np.stack([load(p) for p in samples])), expected)


def test_path_kinds(classifier, samples):
    """str, bytes and os.PathLike name the same file; one path alone is a list of one."""
    first = classifier.classify([str(samples[0])])
    assert classifier.classify([Path(samples[0])]) == first
    assert classifier.classify([os.fsencode(samples[0])]) == first
    assert classifier.classify(samples[0]) == first
    assert classifier.classify(iter([samples[0]])) == first
    assert classifier.classify([]) == []


def test_default_top_k_and_labels(samples):
    names = [f"class {i}" for i in range(10)]
    clf = vitk.Classifier(FMNIST, threads=2, top_k=2, labels=names)
    plain = vitk.Classifier(FMNIST, threads=2)
    top = clf.classify(samples)
    assert all(len(t) == 2 for t in top)
    for mine, theirs in zip(top, plain.classify(samples, top_k=2)):
        assert [label for label, _ in mine] == [names[plain.classes.index(l)] for l, _ in theirs]
        assert [p for _, p in mine] == [p for _, p in theirs]


def test_logits(classifier, samples):
    batch = np.stack([load(p) for p in samples])
    logits = classifier.logits(batch)
    assert logits.dtype == np.float32
    assert logits.shape == (len(samples), len(classifier.classes))
    assert logits.flags.c_contiguous and logits.flags.writeable
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = e / e.sum(axis=1, keepdims=True)
    for row, top in zip(probabilities, classifier.classify(batch)):
        label, p = top[0]
        assert classifier.classes[int(row.argmax())] == label
        assert abs(float(row.max()) - p) < 1e-5
    assert classifier.logits(batch[:0]).shape == (0, len(classifier.classes))
    np.testing.assert_array_equal(classifier.logits(batch[2]), logits[2:3])


def test_views_without_copies_read_the_right_pixels(classifier, samples):
    """Crops, strided and reversed views give what their contiguous copies give."""
    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, size=(6, 40, 44), dtype=np.uint8)
    for view in (big[:, 3:31, 5:33], big[::2, ::-1, :], big[:, :, ::2], big.transpose(0, 2, 1)):
        np.testing.assert_array_equal(classifier.logits(view),
                                      classifier.logits(np.ascontiguousarray(view)))
    colour = rng.integers(0, 256, size=(3, 30, 30, 4), dtype=np.uint8)
    view = colour[:, 1:29, 1:29, :3]  # pixels 4 bytes apart: copied
    np.testing.assert_array_equal(classifier.logits(view),
                                  classifier.logits(np.ascontiguousarray(view)))


def test_colour_arrays_are_rgb(classifier, tmp_path):
    """A colour array is RGB: it classifies as the same pixels saved to a PNG, and grey pixels
    given as RGB or RGBA (opaque) classify as the grey image."""
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, size=(28, 28, 3), dtype=np.uint8)
    rgb[..., 0] = 255  # strongly unequal channels: the order shows
    path = tmp_path / "colour.png"
    Image.fromarray(rgb, "RGB").save(path)
    from_file = classifier.logits([load(path)])
    np.testing.assert_array_equal(from_file, classifier.logits(rgb[None]))
    # The same bytes as BGR are other pixels: a different image.
    assert not np.array_equal(from_file, classifier.logits(rgb[None, :, :, ::-1]))
    np.testing.assert_allclose(classifier.classify([path])[0][0][1],
                               classifier.classify([rgb])[0][0][1], atol=PROBABILITY_TOLERANCE)

    grey = rng.integers(0, 256, size=(2, 28, 28), dtype=np.uint8)
    rgba = np.stack([grey, grey, grey, np.full_like(grey, 255)], axis=-1)
    expected = classifier.logits(grey)
    np.testing.assert_array_equal(classifier.logits(rgba[..., :3]), expected)
    np.testing.assert_array_equal(classifier.logits(rgba), expected)


def test_other_sizes_are_resized_as_files_are(classifier, samples, tmp_path):
    """An array of another size goes through the checkpoint's resize as a file of that size."""
    big = np.asarray(Image.open(samples[0]).resize((50, 43), Image.BICUBIC))
    path = tmp_path / "big.png"
    Image.fromarray(big).save(path)
    assert_same(classifier.classify(big[None]), cli_entries(FMNIST, [path]))
