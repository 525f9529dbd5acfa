"""vitk.TextClassifier against `vitk text-classify --json` on a tiny model trained by the session's
fixture: the same labels and probabilities, top-k, precisions and errors."""

import json

import pytest

import vitk
from conftest import PROBABILITY_TOLERANCE, run_vitk


def cli_classify(model, sentences, folder, *options):
    source = folder / "sentences.txt"
    source.write_text("".join(s + "\n" for s in sentences))
    out = run_vitk("text-classify", "--model", model, "--input", source, "--json", "--threads", 2,
                   *options)
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.parametrize("precision", [None, "int8"])
def test_labels_and_probabilities_equal_the_command(text_model, tmp_path, precision):
    model, sentences = text_model
    clf = vitk.TextClassifier(model, threads=2, precision=precision)
    python = clf.classify(sentences, top_k=2)
    cli = cli_classify(model, sentences, tmp_path, "--top-k", 2,
                       *(["--precision", precision] if precision else []))
    assert len(python) == len(sentences) == len(cli)
    for mine, theirs in zip(python, cli):
        assert [label for label, _ in mine] == theirs["labels"]
        assert [p for _, p in mine] == pytest.approx(theirs["probabilities"],
                                                     abs=PROBABILITY_TOLERANCE)
    assert {top[0][0] for top in python} == {"marked", "plain"}, "one label for all: no test"


def test_properties_and_one_sentence(text_model):
    model, _ = text_model
    clf = vitk.TextClassifier(model)
    assert sorted(clf.classes) == ["marked", "plain"]
    assert clf.max_tokens == 23  # max_length 24 less the EOS (mean pooling: no class token)
    assert clf.precision == "f32"
    assert "TextClassifier(" in repr(clf)
    one = clf.classify("kalo zq mine")
    assert len(one) == 1 and len(one[0]) == 2  # top_k 5 capped at the 2 labels
    assert one[0][0][0] == "marked"
    assert clf.classify([]) == []


def test_errors(text_model):
    model, _ = text_model
    clf = vitk.TextClassifier(model)
    with pytest.raises(vitk.UsageError, match="sentence 1 is empty"):
        clf.classify(["kalo", "  "])
    with pytest.raises(vitk.UsageError, match="top_k"):
        clf.classify(["kalo"], top_k=0)
    with pytest.raises(vitk.UsageError):
        clf.classify([3])
    with pytest.raises(vitk.Error, match="not a text classifier checkpoint"):
        vitk.TextClassifier(__file__.replace("test_text_classifier.py", "") + "../../vit/models/"
                            "fmnist-vit.h5")
