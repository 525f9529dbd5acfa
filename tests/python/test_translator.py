"""vitk.Translator against `vitk translate --input FILE` on a tiny model trained by the session's
fixture: the same lines for beam, greedy and sampled search, the same n-best lists and scores."""

import pytest

import vitk
from conftest import run_vitk


def cli_translate(model, sentences, folder, *options):
    source = folder / "source.txt"
    source.write_text("".join(s + "\n" for s in sentences))
    out = run_vitk("translate", "--model", model, "--input", source, "--threads", 2, *options)
    return out.stdout.split("\n")[:-1]


SEARCHES = [
    ({}, []),
    ({"greedy": True}, ["--greedy"]),
    ({"beam_size": 2, "length_penalty": 0.0}, ["--beam-size", 2, "--length-penalty", 0]),
    ({"sample": True, "temperature": 0.7, "top_k": 5, "seed": 3},
     ["--sample", "--temperature", 0.7, "--top-k", 5, "--seed", 3]),
    ({"greedy": True, "max_length_offset": 2}, ["--greedy", "--max-length-offset", 2]),
]


@pytest.mark.parametrize("kwargs,options", SEARCHES)
def test_lines_equal_the_command(mt_model, tmp_path, kwargs, options):
    model, sentences = mt_model
    translator = vitk.Translator(model, threads=2)
    python = translator.translate(sentences, **kwargs)
    assert python == cli_translate(model, sentences, tmp_path, *options)
    assert python[sentences.index("")] == ""
    assert len(set(python)) > 2, "the model translates every sentence alike: no test"


def test_searches_differ(mt_model):
    """The options reach the search: greedy and beam give different translations here."""
    model, sentences = mt_model
    translator = vitk.Translator(model, threads=2)
    assert translator.translate(sentences, greedy=True) != translator.translate(sentences)


def test_nbest_and_scores_equal_the_command(mt_model, tmp_path):
    model, sentences = mt_model
    translator = vitk.Translator(model, threads=2)
    python = translator.translate(sentences, nbest=3)
    cli = {}
    for line in cli_translate(model, sentences, tmp_path, "--nbest", 3):
        index, text, score = line.split(" ||| ")
        cli.setdefault(int(index), []).append((text, float(score)))
    assert len(python) == len(sentences)
    for i, nbest in enumerate(python):
        expected = cli[i]
        assert [text for text, _ in nbest] == [text for text, _ in expected]
        assert [score for _, score in nbest] == pytest.approx([s for _, s in expected], abs=1e-5)
        scores = [score for _, score in nbest]
        assert scores == sorted(scores, reverse=True)
    assert python[sentences.index("")] == [("", 0.0)]
    best = translator.translate(sentences, return_scores=True)
    assert [b[0] for b in best] == [n[0] for n in python]


def test_int8_equals_the_command(mt_model, tmp_path):
    model, sentences = mt_model
    quantised = tmp_path / "mt-int8.h5"
    run_vitk("quantize", model, "--out", quantised)
    translator = vitk.Translator(quantised, threads=2)
    assert translator.precision == "int8"
    assert translator.translate(sentences) == cli_translate(quantised, sentences, tmp_path,
                                                            "--precision", "int8")


def test_properties_and_one_sentence(mt_model):
    model, sentences = mt_model
    translator = vitk.Translator(model)
    assert translator.precision == "f32"
    assert translator.max_source_tokens == 23  # the model's 24 less the EOS
    assert translator.translate(sentences[0]) == translator.translate(sentences[:1])
    assert translator.translate([]) == []


@pytest.mark.parametrize("kwargs,message", [
    ({"greedy": True, "sample": True}, "exclude each other"),
    ({"temperature": 0.5}, "sample=True"),
    ({"greedy": True, "nbest": 2}, "beam search"),
    ({"nbest": 5}, "beam size"),
    ({"beam_size": 0}, "beam size"),
])
def test_bad_search_options(mt_model, kwargs, message):
    translator = vitk.Translator(mt_model[0])
    with pytest.raises(vitk.UsageError, match=message):
        translator.translate(["kalo mine"], **kwargs)
