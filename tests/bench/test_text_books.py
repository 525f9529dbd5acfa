#!/usr/bin/python3
"""Self-check of tests/bench/text_books.py's metrics (top-1, macro-F1, accuracy per group) on
hand-made predictions; needs neither fastText nor vitk.

    /usr/bin/python3 tests/bench/test_text_books.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_books import group_accuracy, macro_f1, score, top1  # noqa: E402

passed = failed = 0


def check(condition, what):
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


def close(a, b):
    return abs(a - b) < 1e-9


GROUP_OF = {"Gen": "law", "Exod": "law", "Ps": "wisdom", "Matt": "gospels", "Obad": "prophets"}

# Gen: 2 true, 3 predicted, 2 right -> F1 2*2/(2+3) = 0.8.
# Exod: 1 true, never predicted -> F1 0.
# Ps: 2 true, 1 predicted, 1 right -> F1 2*1/(2+1) = 2/3.
# Matt: never true, predicted once -> F1 0 (scikit-learn's macro average counts it).
# Obad: neither true nor predicted -> left out.
gold = ["Gen", "Gen", "Exod", "Ps", "Ps"]
pred = ["Gen", "Gen", "Gen", "Ps", "Matt"]

check(close(top1(gold, pred), 60.0), f"top-1 3 of 5 = 60, got {top1(gold, pred)}")
check(close(top1(["Gen"], ["Gen"]), 100.0), "top-1 of one right item is 100")
expected_f1 = 100.0 * (0.8 + 0.0 + 2.0 / 3.0 + 0.0) / 4
check(close(macro_f1(gold, pred), expected_f1),
      f"macro-F1 over Gen, Exod, Ps, Matt = {expected_f1:.4f}, got {macro_f1(gold, pred):.4f}")
check(close(macro_f1(gold, gold), 100.0), "macro-F1 of perfect predictions is 100")
check(close(macro_f1(["Gen", "Exod"], ["Exod", "Gen"]), 0.0), "macro-F1 of swapped labels is 0")

groups = group_accuracy(gold, pred, GROUP_OF)
check(list(groups) == ["law", "wisdom"],
      f"groups with items only, in groups.tsv's order: {list(groups)}")
check(close(groups["law"], 200.0 / 3), f"law: 2 of 3 = 66.7, got {groups['law']}")
check(close(groups["wisdom"], 50.0), f"wisdom: 1 of 2 = 50, got {groups['wisdom']}")
check(close(group_accuracy(["Gen"], ["Exod"], GROUP_OF)["law"], 0.0),
      "the right group but the wrong book counts as wrong")

figures = score(gold, pred, GROUP_OF)
check(sorted(figures) == ["count", "groups", "macro_f1", "top1"], f"score keys: {sorted(figures)}")
check(figures["count"] == 5 and figures["groups"] == groups, "score: count and groups")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
