"""Bad files, arrays, models and options: a vitk.Error or vitk.UsageError with a clear message,
never a crash of the interpreter (each case also run uncaught in a fresh one)."""

import re

import numpy as np
import pytest

import vitk
from conftest import FMNIST, run_python


def test_the_exception_classes():
    assert issubclass(vitk.Error, RuntimeError)
    assert issubclass(vitk.UsageError, vitk.Error)
    assert issubclass(vitk.UsageError, ValueError)
    assert not issubclass(vitk.Error, ValueError)
    assert vitk.Error.__module__ == vitk.UsageError.__module__ == "vitk"
    assert vitk.Error.__doc__ and vitk.UsageError.__doc__


def test_unreadable_files_name_the_path(classifier, samples, tmp_path):
    missing = tmp_path / "missing.png"
    with pytest.raises(vitk.Error, match=f"^{re.escape(str(missing))}: file not found$") as caught:
        classifier.classify([samples[0], missing, tmp_path / "second-missing.png"])
    assert not isinstance(caught.value, vitk.UsageError)
    garbage = tmp_path / "garbage.png"
    garbage.write_bytes(b"\x89PNG not really")
    with pytest.raises(vitk.Error, match="garbage.png: "):
        classifier.classify([garbage])


# (what, expression of `clf` and `np`, the exception, words of its message)
BAD_CALLS = [
    ("float32 array", "clf.classify(np.zeros((2, 28, 28), np.float32))", vitk.UsageError,
     "dtype uint8.*not float32"),
    ("int64 image in a list", "clf.classify([np.zeros((28, 28), np.int64)])", vitk.UsageError,
     "input 0: .*not int64"),
    ("5-D array", "clf.logits(np.zeros((1, 2, 28, 28, 3), np.uint8))", vitk.UsageError,
     r"not of shape \(1, 2, 28, 28, 3\)"),
    ("1-D array", "clf.logits(np.zeros(28, np.uint8))", vitk.UsageError, r"shape \(28,\)"),
    ("2 channels", "clf.classify(np.zeros((3, 28, 28, 2), np.uint8))", vitk.UsageError,
     "image 0: 2 channels"),
    ("4-D image in a list", "clf.classify([np.zeros((28, 28), np.uint8), "
     "np.zeros((1, 28, 28, 3), np.uint8)])", vitk.UsageError, "input 1: an image in a list"),
    ("empty image", "clf.logits(np.zeros((1, 0, 28), np.uint8))", vitk.UsageError,
     "image 0: a size of 0x28"),
    ("paths and arrays", "clf.classify(['a.png', np.zeros((28, 28), np.uint8)])",
     vitk.UsageError, "not both"),
    ("paths to logits", "clf.logits(['a.png'])", vitk.UsageError, "not paths"),
    ("not images", "clf.classify(7)", vitk.UsageError, "not <class 'int'>"),
    ("top_k 0", "clf.classify(np.zeros((28, 28), np.uint8), top_k=0)", vitk.UsageError,
     "top_k must be at least 1"),
    ("missing model", "vitk.Classifier('no/such/model.h5')", vitk.Error,
     "no/such/model.h5: cannot open"),
    ("precision f16", f"vitk.Classifier({str(FMNIST)!r}, precision='f16')", vitk.UsageError,
     "precision must be f32, bf16 or int8, not 'f16'"),
    ("threads -1", f"vitk.Classifier({str(FMNIST)!r}, threads=-1)", vitk.UsageError,
     "threads must be at least 1"),
    ("batch_size 0", f"vitk.Classifier({str(FMNIST)!r}, batch_size=0)", vitk.UsageError,
     "batch_size must be at least 1"),
    ("labels", f"vitk.Classifier({str(FMNIST)!r}, labels=['a', 'b'])", vitk.UsageError,
     "2 labels given, but the model has 10 classes"),
    ("image_size", f"vitk.Classifier({str(FMNIST)!r}, image_size='big')", vitk.UsageError,
     "image_size is an int or"),
    ("a classifier as a translator", f"vitk.Translator({str(FMNIST)!r})", vitk.Error,
     "fmnist-vit.h5"),
    ("a string to main", "vitk.main('inspect')", vitk.UsageError, "a list of words"),
]


@pytest.fixture(scope="module")
def clf():
    return vitk.Classifier(FMNIST, threads=1)


@pytest.mark.parametrize("what,code,error,message", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_raise(clf, what, code, error, message):
    with pytest.raises(error, match=message):
        eval(code, {"clf": clf, "np": np, "vitk": vitk})  # noqa: S307 - the cases above


def test_bad_calls_do_not_crash_the_interpreter():
    """Uncaught, each case ends the interpreter with its traceback (exit code 1), not a signal."""
    for what, code, error, message in BAD_CALLS:
        done = run_python("import numpy as np, vitk\n"
                          f"clf = vitk.Classifier({str(FMNIST)!r}, threads=1)\n{code}\n")
        assert done.returncode == 1, f"{what}: exit {done.returncode}\n{done.stderr}"
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"vitk.{error.__name__}: "), f"{what}: {last}"
