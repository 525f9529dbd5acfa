"""tools/examples/classify.py runs and prints what `vitk classify` finds."""

import subprocess
import sys

from conftest import FMNIST, SOURCE_DIR, cli_classify

EXAMPLE = SOURCE_DIR / "tools" / "examples" / "classify.py"


def run_example(*args):
    done = subprocess.run([sys.executable, str(EXAMPLE), *map(str, args)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def expected_lines(model, paths, precision):
    by_path = cli_classify(model, paths, top_k=3)
    lines = [f"{model.name}: 10 classes, 28x28 input, {precision}"]
    for p in paths:
        entry = by_path[str(p)]
        lines.append(f"{p.name}: " + ", ".join(
            f"{label} {prob:.3f}" for label, prob in zip(entry["labels"], entry["probabilities"])))
    lines.append(f"array [{len(paths)}, 28, 28]: " +
                 ", ".join(by_path[str(p)]["labels"][0] for p in paths))
    return lines


def test_the_bundled_samples(samples):
    assert run_example() == expected_lines(FMNIST, samples, "f32")


def test_a_model_and_images_given(int8_model, samples):
    chosen = samples[3:6]
    assert run_example(int8_model, *chosen) == expected_lines(int8_model, chosen, "int8")
