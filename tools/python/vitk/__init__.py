"""vitk: Vision Transformers, translation, captioning and text classification from Python.

The Python face of vitk's C++ library (libvitk): load a checkpoint once,
then classify, translate or caption from your own program, with numpy arrays
or image files, in the same process and with the same results as the `vitk`
command.

    >>> import vitk, numpy as np
    >>> clf = vitk.Classifier("vit/models/fmnist-vit.h5", threads=2)
    >>> clf.classes[:2], clf.image_size
    (['T-shirt/top', 'Trouser'], (28, 28))
    >>> clf.classify(["datasets/samples/0000-ankle-boot.png"], top_k=1)
    [[('Ankle boot', 0.91...)]]
    >>> clf.logits(np.zeros((4, 28, 28), np.uint8)).shape
    (4, 10)
    >>> vitk.Captioner("vit/models/scenes-caption.h5").caption("scene.png")
    ['a bag above a sandal']
    >>> vitk.TextClassifier("runs/books-en/best.h5").classify("Jesus wept.", top_k=1)
    [[('John', 0.82...)]]
    >>> vitk.main(["inspect", "vit/models/fmnist-vit.h5"])   # any subcommand
    0

Classes: Classifier, Translator, Captioner, TextClassifier. Functions: main (a `vitk`
subcommand in this process). Errors: vitk.Error (a RuntimeError) for files
and data, vitk.UsageError (a vitk.Error and a ValueError) for wrong calls;
their message is the one the command prints after "vitk: error: ".

Calls release the GIL while the model computes, and one object may be used
from several threads; models run one call at a time in the process, each
with its own `threads` for the matrix products.
"""

from ._vitk import (
    Captioner,
    Classifier,
    Error,
    TextClassifier,
    Translator,
    UsageError,
    __version__,
    main,
)

__all__ = [
    "Classifier",
    "Translator",
    "Captioner",
    "TextClassifier",
    "main",
    "Error",
    "UsageError",
    "__version__",
]
