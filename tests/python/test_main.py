"""vitk.main (any subcommand in this process), `python3 -m vitk`, the package's metadata and
docstrings."""

import inspect
import subprocess
import sys

import vitk
from conftest import FMNIST, run_vitk


def test_main_runs_a_subcommand(capfd):
    assert vitk.main(["inspect", str(FMNIST)]) == 0
    out, _ = capfd.readouterr()
    assert out == run_vitk("inspect", FMNIST).stdout


def test_main_returns_usage_errors(capfd):
    assert vitk.main(["classify", "--top-k", "0"]) == 2
    _, err = capfd.readouterr()
    assert "vitk: error: --top-k" in err
    assert vitk.main(["no-such-command"]) == 2


def test_main_takes_path_like_words(capfd, tmp_path):
    out = tmp_path / "q.h5"
    assert vitk.main(["quantize", FMNIST, "--out", out]) == 0
    assert vitk.Classifier(out).precision == "int8"


def test_python_dash_m_vitk():
    done = subprocess.run([sys.executable, "-m", "vitk", "inspect", str(FMNIST)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == run_vitk("inspect", FMNIST).stdout
    done = subprocess.run([sys.executable, "-m", "vitk", "classify", "--top-k", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2


def test_version_and_exports():
    assert vitk.__version__ == run_vitk("--version").stdout.split()[1]
    assert sorted(vitk.__all__) == sorted(
        ["Classifier", "Translator", "Captioner", "TextClassifier", "main", "Error", "UsageError",
         "__version__"])
    for name in vitk.__all__:
        assert hasattr(vitk, name)


def test_everything_public_has_a_docstring():
    assert "Classifier" in vitk.__doc__
    for name in ("Classifier", "Translator", "Captioner", "main"):
        thing = getattr(vitk, name)
        assert thing.__doc__ and len(thing.__doc__) > 80, name
        assert thing.__module__ == "vitk"
        if not inspect.isclass(thing):
            continue
        for member, value in vars(thing).items():
            if member.startswith("_") and member != "__init__":
                continue
            assert getattr(value, "__doc__", None), f"{name}.{member}"
    help_text = vitk.Classifier.classify.__doc__
    assert help_text.startswith("classify(inputs, top_k=None)")
    assert "[N, H, W, C]" in help_text and "RGB" in help_text
