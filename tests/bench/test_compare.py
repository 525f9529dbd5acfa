#!/usr/bin/python3
"""ctest: the logic of tests/bench/compare.py without PyTorch and without timing anything: row
selection, targets and ratios, the table in both forms, the parsers of vitk's output, the
per-child peak memory, the bf16 rows' detection and a --dry-run end to end.

    /usr/bin/python3 tests/bench/test_compare.py [-v]

With VITK_BINARY set (ctest sets it to the built vitk) the dry run also asks that binary.
"""
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import vitk_side  # noqa: E402
from bench_common import run_measured  # noqa: E402

COMPARE = os.path.join(HERE, "compare.py")


def result(key, vitk=(), torch=(), rows=None, notes=()):
    rows = rows or compare.make_rows(False)
    row = next(r for r in rows if r.key == key)
    return compare.Result(row, list(vitk), list(torch), [100.0] * len(vitk), [900.0] * len(torch),
                          list(notes))


def fake_vitk(directory, precision_in):
    """A shell script standing in for vitk: `vitk SUB --help` lists --precision for the
    subcommands in precision_in."""
    path = os.path.join(directory, "vitk")
    cases = "".join(f'  "{sub} --help") echo "  --precision f32|bf16  data type";;\n'
                    for sub in precision_in)
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\ncase "$1 $2" in\n{cases}  *) echo "  --threads N";;\nesac\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class Rows(unittest.TestCase):
    def test_every_row_of_the_issue_once(self):
        keys = [r.key for r in compare.make_rows(False)]
        self.assertEqual(len(keys), len(set(keys)))
        for key in ("vit-b16-224-b1", "vit-b16-224-b8", "vit-b16-384-b1", "vit-train", "mt-train",
                    "mt-greedy", "mt-beam4", "vit-b16-224-b1-bf16", "vit-train-bf16",
                    "mt-train-bf16"):
            self.assertIn(key, keys)
        rows = {r.key: r for r in compare.make_rows(False)}
        self.assertEqual(rows["vit-b16-384-b1"].params["image_size"], 384)
        self.assertEqual(rows["vit-train"].params["batch"], 128)
        self.assertEqual((rows["mt-train"].params["batch"], rows["mt-train"].params["length"]),
                         (128, 32))
        self.assertEqual(rows["mt-greedy"].params["sentences"], 500)
        self.assertEqual(rows["mt-beam4"].torch_key, "mt-greedy")
        self.assertEqual(rows["vit-train-bf16"].f32_key, "vit-train")

    def test_quick_sizes_are_tiny_and_patch_aligned(self):
        for r in compare.make_rows(True):
            if r.kind == "vit-infer":
                self.assertLessEqual(r.params["image_size"], 64)
                self.assertEqual(r.params["image_size"] % r.params["patch_size"], 0)
            if r.kind in ("vit-train", "mt-train"):
                self.assertLessEqual(r.params["batch"], 8)

    def test_only_takes_names_and_prefixes_in_table_order(self):
        rows = compare.make_rows(False)
        self.assertEqual(compare.select_rows(rows, ""), rows)
        keys = lambda only: [r.key for r in compare.select_rows(rows, only)]  # noqa: E731
        self.assertEqual(keys("vit-b16-224-b1"), ["vit-b16-224-b1", "vit-b16-224-b1-bf16"])
        self.assertEqual(len(keys("vit-b16")), 6)
        self.assertEqual(keys("mt-beam4,vit-train"),
                         ["vit-train", "vit-train-bf16", "mt-beam4"])
        self.assertEqual(keys("mt"), ["mt-train", "mt-train-bf16", "mt-greedy", "mt-beam4"])
        with self.assertRaises(ValueError) as e:
            compare.select_rows(rows, "vit-b1")  # a prefix must end at a '-'
        self.assertIn("vit-b16-224-b1", str(e.exception))


class Targets(unittest.TestCase):
    def row(self, key):
        return next(r for r in compare.make_rows(False) if r.key == key)

    def test_against_pytorch(self):
        r = self.row("vit-b16-224-b1")
        self.assertEqual(compare.target_check(r, 35.0, 10.0, None)[1:], (3.5, True))
        self.assertEqual(compare.target_check(r, 34.0, 10.0, None)[2], False)
        self.assertEqual(compare.target_check(r, 34.0, None, None)[2], None)
        self.assertEqual(compare.target_check(self.row("vit-b16-224-b8"), 3, 1, None),
                         ("", None, None))
        self.assertEqual(compare.target_check(self.row("mt-beam4"), 50, 10, None)[2], True)
        self.assertEqual(compare.target_check(self.row("mt-train"), 24, 10, None)[2], False)

    def test_bf16_against_vitk_f32(self):
        r = self.row("vit-b16-224-b1-bf16")
        text, got, met = compare.target_check(r, 17.0, 1.0, 10.0)
        self.assertIn("vitk f32", text)
        self.assertAlmostEqual(got, 1.7)
        self.assertTrue(met)
        self.assertFalse(compare.target_check(r, 16.9, 100.0, 10.0)[2])
        self.assertIsNone(compare.target_check(r, 16.9, 100.0, None)[2])

    def test_medians_and_numbers(self):
        self.assertEqual(compare.median_or_none([3.0, None, 1.0, 2.0]), 2.0)
        self.assertIsNone(compare.median_or_none([]))
        self.assertEqual([compare.fmt_value(v) for v in (None, 1234.5, 56.78, 3.14159)],
                         ["-", "1234", "56.8", "3.14"])
        self.assertEqual(compare.fmt_ratio(2.0), "2.00x")
        self.assertEqual(compare.fmt_ratio(None), "-")


class Table(unittest.TestCase):
    def results(self):
        return [result("vit-b16-224-b1", [40.0, 36.0, 38.0], [10.0, 9.0, 11.0]),
                result("vit-b16-224-b1-bf16", [70.0], [], notes=["bf16 note"]),
                result("vit-train", [], [30.0], notes=["vitk failed: boom"]),
                result("mt-greedy", [60.0], [10.0], notes=["bf16 note"])]

    def test_plain(self):
        lines = compare.table_lines(self.results())
        self.assertTrue(lines[0].startswith("row"))
        for column in ("vitk", "PyTorch", "unit", "vitk/PyTorch", "target", "met?",
                       "vitk peak MiB", "PyTorch peak MiB"):
            self.assertIn(column, lines[0])
        b1 = lines[1].split()
        self.assertIn("38.0", b1)  # medians
        self.assertIn("10.0", b1)
        self.assertIn("3.80x", b1)
        self.assertIn("yes", b1)
        self.assertIn("(1.84x)", lines[2])  # 70 / 38: bf16 against vitk f32
        self.assertIn("[1]", lines[2])
        self.assertIn("[2]", lines[3])
        self.assertIn("[1]", lines[4])  # the same note, one number
        self.assertEqual(lines[3].split()[-2:], ["-", "900"])
        self.assertEqual(lines[-2:], ["[1] bf16 note", "[2] vitk failed: boom"])
        # Columns line up: the left-aligned unit column starts at the same place on every row.
        at = lines[0].index("unit")
        for line in lines[1:5]:
            self.assertIn(line[at:].split()[0], ("images/s", "sentences/s"), line)

    def test_markdown(self):
        lines = compare.table_lines(self.results(), markdown=True)
        self.assertTrue(lines[0].startswith("| row | vitk | PyTorch |"))
        self.assertTrue(lines[1].startswith("| --- | ---: | ---: | --- |"))
        self.assertEqual(lines[0].count("|"), lines[2].count("|"))
        self.assertIn("3.80×", lines[2])
        self.assertIn("≥ 3.5× PyTorch", lines[2])


class VitkOutput(unittest.TestCase):
    def test_parsers(self):
        self.assertEqual(vitk_side.parse_classify_benchmark(
            "random weights: 224x224, ...\nmodel alone, batch 8, 2 threads, avx512_core_bf16: "
            "21.5 images/s (43 batches in 16.01 s, 31.9 s of CPU: 10.8 images per CPU-second)\n"),
            21.5)
        self.assertAlmostEqual(vitk_side.parse_step_bench(
            "round 1: 690.1 ms/step\nvit-step: batch 128, f32, 2 threads: best 688.0 ms/step "
            "(186.0 images/s), median 690.5 ms/step; best 1300.0 CPU ms/step\n"), 0.6905)
        self.assertEqual(vitk_side.parse_translate_seconds(
            "vitk: translated 500 sentences (0 empty, 0 truncated) in 12.34 s: 40.5 sentences/s, "
            "greedy\n"), 12.34)
        with self.assertRaises(vitk_side.VitkOutputError):
            vitk_side.parse_step_bench("something else")

    def test_has_option(self):
        with tempfile.TemporaryDirectory() as tmp:
            vitk = fake_vitk(tmp, ["classify"])
            self.assertTrue(vitk_side.has_option(vitk, "classify", "--precision"))
            self.assertFalse(vitk_side.has_option(vitk, "train", "--precision"))
            self.assertFalse(vitk_side.has_option(vitk, "classify", "--prec"))


class PeakMemory(unittest.TestCase):
    def test_each_child_reports_its_own_peak(self):
        # wait4's ru_maxrss is per child: a small child after a big one reports its own size
        # (RUSAGE_CHILDREN would still report the big one's).
        big = run_measured([sys.executable, "-c", "b = bytearray(96 << 20); print(len(b))"])
        small = run_measured([sys.executable, "-c", "print(1)"])
        self.assertEqual(big.stdout.strip(), str(96 << 20))
        self.assertGreater(big.peak_rss_mib, 96)
        self.assertLess(small.peak_rss_mib, big.peak_rss_mib - 64)
        self.assertEqual(small.returncode, 0)

    def test_failure_keeps_the_stderr_tail(self):
        cmd = [sys.executable, "-c", "import sys; sys.exit('no such thing')"]
        with self.assertRaises(subprocess.CalledProcessError) as e:
            run_measured(cmd)
        self.assertIn("no such thing", e.exception.stderr)
        self.assertEqual(run_measured(cmd, check=False).returncode, 1)


class Corpus(unittest.TestCase):
    def test_placeholder_corpus_is_seeded_and_parallel(self):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            compare.generated_corpus(a, True, 7)
            compare.generated_corpus(b, True, 7)
            for name in ("train.tsv", "valid.tsv", "test.src"):
                with open(os.path.join(a, name)) as fa, open(os.path.join(b, name)) as fb:
                    self.assertEqual(fa.read(), fb.read(), name)
            with open(os.path.join(a, "test.src")) as f:
                self.assertEqual(len(f.read().splitlines()), 7)
            with open(os.path.join(a, "train.tsv")) as f:
                for line in f:
                    src, tgt = line.rstrip("\n").split("\t")
                    self.assertEqual(len(src.split()), len(tgt.split()))


class Measure(unittest.TestCase):
    """measure() with stand-ins for both sides: the rounds, their order, medians, notes."""

    def settings(self, workdir):
        return compare.Settings("vitk", 2, 0.1, True, "model.h5", ["a", "b"], workdir)

    def test_rounds_alternate_and_share_pytorch_s_measurement(self):
        rows = compare.select_rows(compare.make_rows(True), "vit-b16-224-b1,mt")
        calls, values = [], iter(range(1, 1000))

        def measured():
            return run_measured([sys.executable, "-c", "pass"])

        def vitk(row, s):
            calls.append(("vitk", row.key))
            if row.key == "mt-train-bf16":
                raise subprocess.CalledProcessError(2, ["vitk", "bench", "mt-step"], "",
                                                    "unknown option --precision")
            return float(next(values)), measured(), (["x", "y"] if row.key == "mt-greedy"
                                                     else None)

        def torch(spec):
            calls.append(("torch", spec["kind"]))
            if spec["kind"] == "mt-train":
                raise RuntimeError("no torch here")
            if spec.get("hyp_out"):
                with open(spec["hyp_out"], "w") as f:
                    f.write("x\nz\n")
            return 10.0, measured(), "1.13"

        with tempfile.TemporaryDirectory() as tmp:
            log = []
            results = compare.measure(rows, self.settings(tmp), 3, log.append, vitk, torch)
        self.assertEqual([r.row.key for r in results], [r.key for r in rows])
        by_key = {r.row.key: r for r in results}
        # Round 1: PyTorch first, then the vitk rows compared with it; round 2: the other way.
        self.assertEqual(calls[:3], [("torch", "vit-infer"), ("vitk", "vit-b16-224-b1"),
                                     ("vitk", "vit-b16-224-b1-bf16")])
        self.assertEqual(len(calls), 9 + 8 + 8)  # mt-train-bf16 only in round 1
        self.assertEqual(calls[9:12], [("vitk", "vit-b16-224-b1"), ("vitk", "vit-b16-224-b1-bf16"),
                                      ("torch", "vit-infer")])
        self.assertEqual(calls.count(("torch", "vit-infer")), 3)  # once per round, shared
        self.assertEqual(calls.count(("torch", "mt-decode")), 3)  # greedy and beam share it
        self.assertEqual(calls.count(("vitk", "mt-train-bf16")), 1)  # failed: not again
        self.assertEqual(len(by_key["vit-b16-224-b1"].vitk), 3)
        self.assertEqual(by_key["vit-b16-224-b1"].torch, [10.0] * 3)
        self.assertEqual(len(by_key["vit-b16-224-b1"].vitk_rss), 3)
        self.assertEqual(by_key["mt-beam4"].torch, [10.0] * 3)
        self.assertEqual(by_key["mt-train"].torch, [])
        self.assertIn("PyTorch failed: no torch here", by_key["mt-train"].notes)
        self.assertIn("PyTorch failed: no torch here", by_key["mt-train-bf16"].notes)
        self.assertEqual(by_key["mt-train-bf16"].vitk, [])
        self.assertTrue(any(n.startswith("vitk failed: vitk bench mt-step...: unknown option")
                            for n in by_key["mt-train-bf16"].notes), by_key["mt-train-bf16"].notes)
        self.assertIn("identical greedy translations, vitk and PyTorch: 1/2",
                      by_key["mt-greedy"].notes)
        self.assertIn("PyTorch column: the f32 row's PyTorch", by_key["vit-b16-224-b1-bf16"].notes)
        self.assertTrue(any("round 3/3 mt-train: PyTorch failed" in line for line in log))
        # The table takes the results as they are.
        lines = compare.table_lines(results)
        self.assertEqual(len([line for line in lines if line.startswith("[")]),
                         len({n for r in results for n in r.notes}))


class DryRun(unittest.TestCase):
    def dry_run(self, *args):
        return subprocess.run([sys.executable, COMPARE, "--dry-run", *args],
                              capture_output=True, text=True)

    def test_bf16_rows_follow_the_binary_s_help(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = self.dry_run("--quick", "--vitk", fake_vitk(tmp, ["classify"])).stdout
            self.assertIn("vit-b16-224-b1-bf16: vitk: ", out)
            self.assertIn("--precision bf16", out)
            self.assertIn("vit-train-bf16: left out: `vitk train --help` lists no --precision",
                          out)
            self.assertIn("mt-train-bf16: left out", out)
            for key in ("vit-b16-224-b1", "vit-train", "mt-train", "mt-greedy", "mt-beam4"):
                self.assertIn(f"{key}: vitk: ", out)
            self.assertIn("placeholder model: ", out)
            self.assertIn("mt-greedy: PyTorch child: ", out)
            self.assertNotIn("mt-beam4: PyTorch child", out)  # compared with the greedy loop
            out = self.dry_run("--quick", "--vitk",
                               fake_vitk(tmp, ["classify", "train", "mt-train"])).stdout
            self.assertNotIn("left out", out)

    def test_only_markdown_and_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            vitk = fake_vitk(tmp, [])
            done = self.dry_run("--vitk", vitk, "--only", "mt-train", "--markdown")
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("| row | vitk |", done.stdout)
            self.assertIn("bench mt-step", done.stdout)
            self.assertNotIn("classify", done.stdout)
            self.assertIn("--batch-size 128 --steps 5", done.stdout)
            bad = self.dry_run("--vitk", vitk, "--only", "nothing")
            self.assertEqual(bad.returncode, 2)
            self.assertIn("mt-greedy", bad.stderr)
            self.assertEqual(self.dry_run("--rounds", "0").returncode, 2)

    @unittest.skipUnless(os.environ.get("VITK_BINARY"), "VITK_BINARY not set")
    def test_with_the_built_vitk(self):
        done = self.dry_run("--quick", "--vitk", os.environ["VITK_BINARY"])
        self.assertEqual(done.returncode, 0, done.stderr)
        for key in ("vit-b16-224-b1", "vit-train", "mt-train", "mt-greedy", "mt-beam4"):
            self.assertIn(f"{key}: vitk: ", done.stdout)


if __name__ == "__main__":
    unittest.main()
