"""vitk.Captioner against `vitk caption --json` with the bundled scenes model, on scenes made by
`vitk make-scenes`: the same captions and scores from paths and from arrays."""

import json

import numpy as np
import pytest
from PIL import Image

import vitk
from conftest import SCENES_CAPTION, run_vitk


def cli_caption(paths, *options):
    out = run_vitk("caption", "--model", SCENES_CAPTION, "--json", "--threads", 2, *options,
                   *paths)
    by_image = {entry["image"]: entry["captions"] for entry in json.loads(out.stdout)}
    return [by_image[str(p)] for p in paths]


@pytest.fixture(scope="module")
def captioner():
    return vitk.Captioner(SCENES_CAPTION, threads=2)


def test_properties(captioner):
    assert captioner.image_size == (84, 84)
    assert captioner.channels == 1
    assert captioner.precision == "int8"  # the bundled model is quantised


@pytest.mark.parametrize("kwargs,options", [
    ({}, []),
    ({"greedy": True}, ["--greedy"]),
    ({"sample": True, "seed": 5, "temperature": 1.5}, ["--sample", "--seed", 5,
                                                      "--temperature", 1.5]),
])
def test_captions_equal_the_command(captioner, scene_images, kwargs, options):
    expected = [c[0]["caption"] for c in cli_caption(scene_images, *options)]
    assert len(set(expected)) > 1, "every scene captioned alike: no test"
    assert captioner.caption(scene_images, **kwargs) == expected
    arrays = np.stack([np.asarray(Image.open(p)) for p in scene_images])
    assert captioner.caption(arrays, **kwargs) == expected


def test_images_in_lists(captioner, scene_images):
    arrays = [np.asarray(Image.open(p)) for p in scene_images]
    assert captioner.caption(arrays) == captioner.caption(scene_images)


def test_nbest_equals_the_command(captioner, scene_images):
    expected = cli_caption(scene_images, "--nbest", 3)
    python = captioner.caption(scene_images, nbest=3)
    for nbest, captions in zip(python, expected):
        assert [text for text, _ in nbest] == [c["caption"] for c in captions]
        assert [s for _, s in nbest] == pytest.approx([c["score"] for c in captions], abs=1e-9)


def test_one_path_and_errors(captioner, scene_images, tmp_path):
    assert captioner.caption(scene_images[0]) == captioner.caption(scene_images[:1])
    assert captioner.caption([]) == []
    bad = tmp_path / "not-an-image.png"
    bad.write_text("text")
    with pytest.raises(vitk.Error, match="not-an-image.png"):
        captioner.caption([scene_images[0], bad])
