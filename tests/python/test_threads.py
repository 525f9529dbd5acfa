"""One Classifier shared by Python threads: the answers of a sequential run, and the GIL released
while the model computes."""

import threading
import time

import numpy as np

from conftest import PROBABILITY_TOLERANCE


def assert_same(a, b):
    assert [[label for label, _ in top] for top in a] == [[label for label, _ in top] for top in b]
    np.testing.assert_allclose([[p for _, p in top] for top in a],
                               [[p for _, p in top] for top in b], rtol=0,
                               atol=PROBABILITY_TOLERANCE)


def test_four_threads_give_the_sequential_answers(classifier, samples):
    rng = np.random.default_rng(2)
    jobs = [list(samples), list(reversed(samples[:7])),
            rng.integers(0, 256, size=(40, 28, 28), dtype=np.uint8),
            rng.integers(0, 256, size=(9, 31, 25, 3), dtype=np.uint8)]
    expected = [classifier.classify(job, top_k=3) for job in jobs]
    results, errors = {}, []

    def work(i):
        try:
            results[i] = [classifier.classify(jobs[i], top_k=3) for _ in range(3)]
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert sorted(results) == list(range(len(jobs)))
    for i, runs in results.items():
        for run in runs:
            assert_same(run, expected[i])


def test_the_gil_is_released_while_the_model_computes(classifier):
    """The main thread runs Python code in the middle of a long logits() call of another."""
    images = np.zeros((64, 28, 28), np.uint8)
    start = time.perf_counter()
    classifier.logits(images)
    once = time.perf_counter() - start
    images = np.zeros((64 * max(1, int(np.ceil(0.5 / once))), 28, 28), np.uint8)  # >= 0.5 s

    span = {}

    def work():
        span["start"] = time.perf_counter()
        classifier.logits(images)
        span["end"] = time.perf_counter()

    worker = threading.Thread(target=work)
    stamps = []
    worker.start()
    while worker.is_alive():
        stamps.append(time.perf_counter())
        sum(range(1000))  # Python work, which needs the GIL
    worker.join()
    quarter = (span["end"] - span["start"]) / 4
    middle = [s for s in stamps if span["start"] + quarter < s < span["end"] - quarter]
    assert middle, f"the main thread did not run during the {4 * quarter:.2f} s call"
