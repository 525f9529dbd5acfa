#!/usr/bin/python3
"""ctest: the logic of tests/bench/compare.py without PyTorch and without timing anything: row
selection, targets and ratios, the table in both forms, the parsers of vitk's output, the
per-child peak memory, the bf16 and int8 rows' detection, ONNX Runtime's side (its columns, rounds,
export and parity bookkeeping and installation, with stand-ins for PyTorch, Node and npm) and a
--dry-run end to end.

    /usr/bin/python3 tests/bench/test_compare.py [-v]

With VITK_BINARY set (ctest sets it to the built vitk) the dry run also asks that binary.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import vitk_side  # noqa: E402
from bench_common import run_measured  # noqa: E402

COMPARE = os.path.join(HERE, "compare.py")


def result(key, vitk=(), torch=(), rows=None, notes=(), ort=None):
    rows = rows or compare.make_rows(False)
    row = next(r for r in rows if r.key == key)
    return compare.Result(row, list(vitk), list(torch), [100.0] * len(vitk), [900.0] * len(torch),
                          list(notes), None if ort is None else list(ort),
                          None if ort is None else [300.0] * len(ort))


BF16 = "f32|bf16"
INT8 = "f32|bf16|int8"
VNNI_ENV = "cpu isa: avx512_core_amx\nbf16: yes\nint8: VNNI (8-bit activations)\n"


def fake_vitk(directory, precision_in, env=VNNI_ENV):
    """A shell script standing in for vitk: `vitk SUB --help` lists --precision with the values
    precision_in gives SUB ({"classify": INT8, ...}; every help has a usage example with
    `--precision int8`, which does not count), and `vitk env` prints env."""
    path = os.path.join(directory, "vitk")
    cases = "".join(f'  "{sub} --help") echo "  --precision {values} (=f32)  data type";;\n'
                    for sub, values in precision_in.items())
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nif [ "$1" = env ]; then printf "{env}"; exit; fi\n'
                f'echo "  vitk $1 --precision int8   # an example"\n'
                f'case "$1 $2" in\n{cases}  *) echo "  --threads N";;\nesac\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class Rows(unittest.TestCase):
    def test_every_row_of_the_issue_once(self):
        keys = [r.key for r in compare.make_rows(False)]
        self.assertEqual(len(keys), len(set(keys)))
        for key in ("vit-b16-224-b1", "vit-b16-224-b8", "vit-b16-384-b1", "vit-train", "mt-train",
                    "mt-greedy", "mt-beam4", "vit-b16-224-b1-bf16", "vit-train-bf16",
                    "mt-train-bf16", "vit-b16-224-b1-int8", "vit-b16-224-b8-int8",
                    "vit-b16-384-b1-int8", "mt-greedy-int8", "mt-beam4-int8"):
            self.assertIn(key, keys)
        rows = {r.key: r for r in compare.make_rows(False)}
        self.assertEqual(rows["vit-b16-384-b1"].params["image_size"], 384)
        self.assertEqual(rows["vit-train"].params["batch"], 128)
        self.assertEqual((rows["mt-train"].params["batch"], rows["mt-train"].params["length"]),
                         (128, 32))
        self.assertEqual(rows["mt-greedy"].params["sentences"], 500)
        self.assertEqual(rows["mt-beam4"].torch_key, "mt-greedy")
        self.assertEqual(rows["vit-train-bf16"].f32_key, "vit-train")
        # An int8 row: the f32 row's PyTorch (and ONNX Runtime) figure and vitk's f32 row of the
        # same search; beam 4 in int8 against beam 4 in f32, not greedy.
        for key, torch_key, f32_key in (("vit-b16-384-b1-int8", "vit-b16-384-b1", "vit-b16-384-b1"),
                                        ("mt-greedy-int8", "mt-greedy", "mt-greedy"),
                                        ("mt-beam4-int8", "mt-greedy", "mt-beam4")):
            r = rows[key]
            self.assertEqual((r.precision, r.torch_key, r.f32_key), ("int8", torch_key, f32_key))
            self.assertEqual(r.params, rows[f32_key].params)
        self.assertEqual(rows["vit-b16-224-b1-int8"].targets,
                         (compare.Target(3.5, "ort"), compare.Target(1.6, "bf16")))
        self.assertEqual(rows["vit-b16-224-b8-int8"].targets, ())
        self.assertEqual(rows["mt-beam4-int8"].targets, (compare.Target(1.5, "f32"),))
        # Fine-tuning ViT-B/16 at 384, batch 8: f32 at 3x PyTorch f32, bf16 at 5x.
        tune, tune_bf16 = rows["vit-finetune-384"], rows["vit-finetune-384-bf16"]
        self.assertEqual((tune.params["image_size"], tune.params["batch"], tune.params["d_model"]),
                         (384, 8, 768))
        self.assertEqual(tune.targets, (compare.Target(3.0, "pytorch"),))
        self.assertEqual((tune_bf16.torch_key, tune_bf16.f32_key, tune_bf16.targets),
                         ("vit-finetune-384", "vit-finetune-384",
                          (compare.Target(5.0, "pytorch"),)))

    def test_finetune_row_runs_the_b16_model_at_384(self):
        row = next(r for r in compare.make_rows(False) if r.key == "vit-finetune-384-bf16")
        s = compare.argparse.Namespace(vitk="/v", threads=2)
        cmd = compare.vitk_command(row, s)
        self.assertEqual(cmd[:3], ["/v", "bench", "vit-step"])
        pairs = dict(zip(cmd[::1], cmd[1::1]))
        for key, value in (("--model.image_size", "384"), ("--model.patch_size", "16"),
                           ("--model.layers", "12"), ("--model.num_classes", "1000"),
                           ("--batch-size", "8"), ("--precision", "bf16")):
            self.assertEqual(pairs[key], value, cmd)
        spec = compare.torch_spec(row, compare.argparse.Namespace(threads=2, quick=False))
        self.assertEqual((spec["kind"], spec["vit_b_16"]), ("vit-finetune", True))

    def test_quick_sizes_are_tiny_and_patch_aligned(self):
        for r in compare.make_rows(True):
            if r.kind == "vit-infer":
                self.assertLessEqual(r.params["image_size"], 64)
                self.assertEqual(r.params["image_size"] % r.params["patch_size"], 0)
            if r.kind in ("vit-train", "mt-train", "vit-finetune"):
                self.assertLessEqual(r.params["batch"], 8)
            if r.kind == "vit-finetune":
                self.assertLessEqual(r.params["image_size"], 64)

    def test_only_takes_names_and_prefixes_in_table_order(self):
        rows = compare.make_rows(False)
        self.assertEqual(compare.select_rows(rows, ""), rows)
        keys = lambda only: [r.key for r in compare.select_rows(rows, only)]  # noqa: E731
        self.assertEqual(keys("vit-b16-224-b1"),
                         ["vit-b16-224-b1", "vit-b16-224-b1-bf16", "vit-b16-224-b1-int8"])
        self.assertEqual(len(keys("vit-b16")), 9)
        self.assertEqual(keys("mt-beam4,vit-train"),
                         ["vit-train", "vit-train-bf16", "mt-beam4", "mt-beam4-int8"])
        self.assertEqual(keys("mt"), ["mt-train", "mt-train-bf16", "mt-greedy", "mt-greedy-int8",
                                      "mt-beam4", "mt-beam4-int8"])
        self.assertEqual(keys("mt-beam4-int8"), ["mt-beam4-int8"])
        with self.assertRaises(ValueError) as e:
            compare.select_rows(rows, "vit-b1")  # a prefix must end at a '-'
        self.assertIn("vit-b16-224-b1", str(e.exception))


class Targets(unittest.TestCase):
    def row(self, key):
        return next(r for r in compare.make_rows(False) if r.key == key)

    def test_against_pytorch(self):
        r = self.row("vit-b16-224-b1")
        self.assertEqual(compare.target_checks(r, 35.0, {"pytorch": 10.0}),
                         [(">= 3.5x PyTorch", 3.5, True)])
        self.assertEqual(compare.target_checks(r, 34.0, {"pytorch": 10.0})[0][2], False)
        self.assertEqual(compare.target_checks(r, 34.0, {"pytorch": None})[0][1:], (None, None))
        self.assertEqual(compare.target_checks(self.row("vit-b16-224-b8"), 3, {"pytorch": 1}), [])
        self.assertEqual(compare.target_checks(self.row("mt-beam4"), 50, {"pytorch": 10})[0][2],
                         True)
        self.assertEqual(compare.target_checks(self.row("mt-train"), 24, {"pytorch": 10})[0][2],
                         False)

    def test_bf16_against_vitk_f32(self):
        r = self.row("vit-b16-224-b1-bf16")
        [(text, got, met)] = compare.target_checks(r, 17.0, {"pytorch": 1.0, "f32": 10.0})
        self.assertEqual(text, ">= 1.7x vitk f32 (1.70x)")  # the factor is in no column
        self.assertAlmostEqual(got, 1.7)
        self.assertTrue(met)
        self.assertFalse(compare.target_checks(r, 16.9, {"pytorch": 100.0, "f32": 10.0})[0][2])
        self.assertEqual(compare.target_checks(r, 16.9, {"pytorch": 100.0, "f32": None}),
                         [(">= 1.7x vitk f32", None, None)])  # the f32 row has no figure
        self.assertEqual(compare.target_checks(r, 16.9, {"pytorch": 100.0}), [])  # not in the run

    def test_int8_against_ort_and_vitk_bf16(self):
        r = self.row("vit-b16-224-b1-int8")
        checks = compare.target_checks(r, 36.0, {"pytorch": 5.0, "ort": 10.0, "f32": 9.0,
                                                 "bf16": 20.0}, "×", "≥")
        self.assertEqual([(text, met) for text, _, met in checks],
                         [("≥ 3.5× ORT", True), ("≥ 1.6× vitk bf16 (1.80×)", True)])
        self.assertEqual(compare.met_text(checks), "yes")
        # The bf16 row left out (a CPU without bf16) or not chosen: the ORT target alone.
        checks = compare.target_checks(r, 30.0, {"pytorch": 5.0, "ort": 10.0, "f32": 9.0})
        self.assertEqual([text for text, _, _ in checks], [">= 3.5x ORT"])
        self.assertEqual(compare.met_text(checks), "no")
        # Without ONNX Runtime (--no-onnxruntime) nor bf16: no target.
        self.assertEqual(compare.target_checks(r, 30.0, {"pytorch": 5.0, "f32": 9.0}), [])
        r = self.row("mt-beam4-int8")
        self.assertEqual(compare.target_checks(r, 15.0, {"pytorch": 1.0, "f32": 10.0}),
                         [(">= 1.5x vitk f32 (1.50x)", 1.5, True)])

    def test_met_of_several_targets(self):
        self.assertEqual(compare.met_text([]), "")
        self.assertEqual(compare.met_text([("a", 1.0, True), ("b", None, None)]), "")
        self.assertEqual(compare.met_text([("a", 1.0, False), ("b", None, None)]), "no")
        self.assertEqual(compare.met_text([("a", 1.0, True), ("b", 2.0, True)]), "yes")

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


class Int8Table(unittest.TestCase):
    """The int8 rows' targets in the table: against ONNX Runtime and vitk's own bf16 (224 batch
    1), against vitk's f32 row of the same search (decoding)."""

    def test_targets(self):
        results = [result("vit-b16-224-b1", [10.0], [5.0], ort=[8.0]),
                   result("vit-b16-224-b1-bf16", [20.0], [5.0], ort=[8.0]),
                   result("vit-b16-224-b1-int8", [30.0], [5.0], ort=[8.0]),
                   result("vit-b16-224-b8-int8", [30.0], [5.0], ort=[8.0]),
                   result("mt-greedy", [100.0], [10.0]),
                   result("mt-greedy-int8", [160.0], [10.0]),
                   result("mt-beam4", [40.0], [10.0]),
                   result("mt-beam4-int8", [50.0], [10.0])]
        lines = compare.table_lines(results, markdown=True)
        int8 = lines[4].split(" | ")
        self.assertIn("3.75×", int8)  # vitk/ORT: 30 / 8
        self.assertIn("≥ 3.5× ORT; ≥ 1.6× vitk bf16 (1.50×)", int8)
        self.assertIn("no", int8)  # ORT's met, bf16's missed
        self.assertNotIn("≥", lines[5])  # batch 8: no target
        self.assertIn("| ≥ 1.5× vitk f32 (1.60×) | yes |", lines[7])  # 160 / greedy's 100
        self.assertIn("| ≥ 1.5× vitk f32 (1.25×) | no |", lines[9])  # 50 / beam's 40
        # Without the bf16 row (left out on this CPU), the ORT target alone, and met.
        lines = compare.table_lines([results[0], results[2]])
        self.assertRegex(lines[2], r">= 3\.5x ORT +yes ")
        self.assertNotIn("bf16", lines[2])


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

    def test_precisions(self):
        with tempfile.TemporaryDirectory() as tmp:
            vitk = fake_vitk(tmp, {"classify": INT8, "train": BF16})
            self.assertEqual(vitk_side.precisions(vitk, "classify"), {"f32", "bf16", "int8"})
            self.assertEqual(vitk_side.precisions(vitk, "train"), {"f32", "bf16"})
            # No option line: the usage example's `--precision int8` does not count.
            self.assertEqual(vitk_side.precisions(vitk, "translate"), set())

    def test_translate_with_a_precision(self):
        # run_vitk's decoding side: the search and --precision on vitk translate's command line,
        # sentences/s from its own timer.
        with tempfile.TemporaryDirectory() as tmp:
            vitk, argv = os.path.join(tmp, "vitk"), os.path.join(tmp, "argv")
            with open(vitk, "w") as f:
                f.write(f"#!{sys.executable}\nimport shutil, sys\n"
                        f"open({argv!r}, 'w').write(' '.join(sys.argv[1:]))\n"
                        "a = sys.argv\n"
                        "shutil.copy(a[a.index('--input') + 1], a[a.index('--output') + 1])\n"
                        "sys.stderr.write('vitk: translated 4 sentences (0 empty, 0 truncated) "
                        "in 0.50 s: 8 sentences/s\\n')\n")
            os.chmod(vitk, 0o755)
            row = next(r for r in compare.make_rows(True) if r.key == "mt-beam4-int8")
            s = compare.Settings(vitk, 2, 0.1, True, "model.h5", ["a", "b", "c", "d"], tmp)
            value, m, hyps = compare.run_vitk(row, s)
            with open(argv) as f:
                args = f.read()
        self.assertEqual((value, hyps), (8.0, ["a", "b", "c", "d"]))
        self.assertIn("--beam-size 4 --length-penalty 0.6 --precision int8", args)
        self.assertTrue(args.startswith("translate --model model.h5 "))


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
        self.assertEqual(calls[:4], [("torch", "vit-infer"), ("vitk", "vit-b16-224-b1"),
                                     ("vitk", "vit-b16-224-b1-bf16"),
                                     ("vitk", "vit-b16-224-b1-int8")])
        self.assertEqual(len(calls), 12 + 11 + 11)  # mt-train-bf16 only in round 1
        self.assertEqual(calls[12:16], [("vitk", "vit-b16-224-b1"),
                                        ("vitk", "vit-b16-224-b1-bf16"),
                                        ("vitk", "vit-b16-224-b1-int8"), ("torch", "vit-infer")])
        self.assertEqual(calls.count(("torch", "vit-infer")), 3)  # once per round, shared
        self.assertEqual(calls.count(("torch", "mt-decode")), 3)  # both searches, both precisions
        self.assertEqual(calls.count(("vitk", "mt-beam4-int8")), 3)
        self.assertEqual(calls.count(("vitk", "mt-train-bf16")), 1)  # failed: not again
        self.assertEqual(len(by_key["vit-b16-224-b1"].vitk), 3)
        self.assertEqual(by_key["vit-b16-224-b1"].torch, [10.0] * 3)
        self.assertEqual(len(by_key["vit-b16-224-b1"].vitk_rss), 3)
        self.assertEqual(by_key["mt-beam4"].torch, [10.0] * 3)
        self.assertEqual(by_key["mt-beam4-int8"].torch, [10.0] * 3)
        self.assertIn("PyTorch column: the f32 row's PyTorch", by_key["mt-greedy-int8"].notes)
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


class OrtTable(unittest.TestCase):
    """ONNX Runtime's columns: there when a row has that side, blank on rows without one."""

    def results(self):
        return [result("vit-b16-224-b1", [40.0, 36.0, 38.0], [10.0], ort=[20.0, 19.0, 21.0]),
                result("vit-b16-224-b1-bf16", [76.0], [10.0], ort=[20.0],
                       notes=["PyTorch and ORT columns: the f32 row's"]),
                result("vit-b16-384-b1", [5.0], [4.0], ort=[],
                       notes=["ONNX Runtime left out: its logits differ"]),
                result("mt-train", [3000.0], [1500.0])]

    def test_plain(self):
        lines = compare.table_lines(self.results())
        head = lines[0]
        for column in ("ORT", "vitk/ORT", "ORT peak MiB"):
            self.assertIn(column, head)
        # The value beside PyTorch's, the ratio beside vitk/PyTorch, the memory last.
        self.assertLess(head.index("PyTorch"), head.index(" ORT "))
        self.assertLess(head.index(" ORT "), head.index("unit"))
        self.assertLess(head.index("vitk/PyTorch"), head.index("vitk/ORT"))
        self.assertTrue(head.endswith("ORT peak MiB"))
        b1 = lines[1].split()
        self.assertIn("20.0", b1)  # ORT's median
        self.assertIn("1.90x", b1)  # 38 / 20
        self.assertEqual(b1[-3:], ["100", "900", "300"])
        self.assertIn("3.80x", lines[2].split())  # bf16: 76 / ORT's f32 20
        b384 = lines[3].split()
        self.assertEqual(b384[-1], "-")  # an ONNX Runtime side without a figure
        self.assertIn("[2]", lines[3])
        mt = lines[4]
        self.assertEqual(mt.split()[-2:], ["100", "900"])  # no ORT side: blank, not "-"
        at = head.index("vitk/ORT")
        self.assertEqual(mt[at:at + len("vitk/ORT")].strip(), "")
        self.assertEqual(lines[-2:], ["[1] PyTorch and ORT columns: the f32 row's",
                                      "[2] ONNX Runtime left out: its logits differ"])
        # Columns line up with the new ones too.
        at = head.index("unit")
        for line in lines[1:5]:
            self.assertIn(line[at:].split()[0], ("images/s", "target"), line)

    def test_markdown(self):
        lines = compare.table_lines(self.results(), markdown=True)
        self.assertTrue(lines[0].startswith("| row | vitk | PyTorch | ORT | unit | vitk/PyTorch "
                                            "| vitk/ORT |"))
        self.assertTrue(lines[0].endswith("| ORT peak MiB |"))
        self.assertTrue(lines[1].startswith("| --- | ---: | ---: | ---: | --- | ---: | ---: |"))
        for line in lines[2:6]:
            self.assertEqual(line.count("|"), lines[0].count("|"), line)
        self.assertIn("| 1.90× |", lines[2])

    def test_no_ort_side_no_columns(self):
        lines = compare.table_lines([result("vit-b16-224-b1", [40.0], [10.0]),
                                     result("mt-train", [3000.0], [1500.0])])
        self.assertNotIn("ORT", lines[0])
        self.assertEqual(len(lines[0].split("  ")), len(compare.table_lines(
            [result("mt-train", [1.0], [1.0])])[0].split("  ")))


class OrtRounds(unittest.TestCase):
    """measure() with an ONNX Runtime stand-in: once per round per PyTorch baseline, between
    PyTorch and vitk, the order reversed every other round, left out where the model failed."""

    def test_rounds(self):
        rows = compare.select_rows(compare.make_rows(True), "vit-b16,mt-train")
        calls = []

        def measured():
            return run_measured([sys.executable, "-c", "pass"])

        def vitk(row, s):
            calls.append(("vitk", row.key))
            return 30.0, measured(), None

        def torch(spec):
            calls.append(("torch", spec["kind"]))
            return 10.0, measured(), "1.13"

        def ort(spec):
            calls.append(("ort", spec["batch"], spec["image_size"]))
            self.assertEqual((spec["mode"], spec["threads"], spec["seconds"]), ("time", 2, 0.1))
            if spec["batch"] == 8 and len([c for c in calls if c[0] == "ort"]) == 2:
                raise subprocess.CalledProcessError(1, ["node", "run_vit.js", '{"mode": "time"}'],
                                                    "", "Error: out of memory")
            return 20.0, measured(), "1.30.0"

        onnx = {32: compare.OnnxModel("/cache/vit-32.onnx", None),
                48: compare.OnnxModel("/cache/vit-48.onnx", "its logits differ by 0.5")}
        with tempfile.TemporaryDirectory() as tmp:
            s = compare.Settings("vitk", 2, 0.1, True, None, None, tmp, onnx)
            log = []
            results = compare.measure(rows, s, 2, log.append, vitk, torch, ort)
        by_key = {r.row.key: r for r in results}
        # Round 1: PyTorch, ONNX Runtime, vitk; round 2 the other way round.
        self.assertEqual(calls[:5], [("torch", "vit-infer"), ("ort", 1, 32),
                                     ("vitk", "vit-b16-224-b1"), ("vitk", "vit-b16-224-b1-bf16"),
                                     ("vitk", "vit-b16-224-b1-int8")])
        second = calls[len(calls) // 2:]
        self.assertEqual(second[:5], [("vitk", "vit-b16-224-b1"), ("vitk", "vit-b16-224-b1-bf16"),
                                      ("vitk", "vit-b16-224-b1-int8"), ("ort", 1, 32),
                                      ("torch", "vit-infer")])
        # Shared like PyTorch's, and never for the 384 row's size that failed its check.
        self.assertEqual([c for c in calls if c[0] == "ort"],
                         [("ort", 1, 32), ("ort", 8, 32)] * 2)
        self.assertEqual(by_key["vit-b16-224-b1"].ort, [20.0, 20.0])
        self.assertEqual(by_key["vit-b16-224-b1-bf16"].ort, [20.0, 20.0])
        self.assertEqual(by_key["vit-b16-224-b1-int8"].ort, [20.0, 20.0])
        self.assertEqual(len(by_key["vit-b16-224-b1"].ort_rss), 2)
        self.assertEqual(by_key["vit-b16-224-b8"].ort, [20.0])  # round 1 failed: a note
        self.assertIn("ONNX Runtime failed: node run_vit.js SPEC...: Error: out of memory",
                      by_key["vit-b16-224-b8"].notes)
        self.assertEqual(by_key["vit-b16-384-b1"].ort, [])
        self.assertIn("ONNX Runtime left out: its logits differ by 0.5",
                      by_key["vit-b16-384-b1"].notes)
        self.assertIn("ONNX Runtime left out: its logits differ by 0.5",
                      by_key["vit-b16-384-b1-bf16"].notes)
        self.assertIsNone(by_key["mt-train"].ort)
        self.assertIn("PyTorch and ORT columns: the f32 row's",
                      by_key["vit-b16-224-b1-bf16"].notes)
        self.assertIn("PyTorch and ORT columns: the f32 row's",
                      by_key["vit-b16-224-b1-int8"].notes)
        self.assertIn("PyTorch column: the f32 row's PyTorch", by_key["mt-train-bf16"].notes)
        self.assertTrue(any("round 1/2 vit-b16-224-b1: ONNX Runtime 20.0 images/s" in line
                            for line in log))
        lines = compare.table_lines(results)
        self.assertIn("vitk/ORT", lines[0])
        self.assertIn("1.50x", lines[1].split())  # 30 / 20

    def test_left_out(self):
        rows = compare.select_rows(compare.make_rows(True), "vit-b16-224-b1")
        s = compare.Settings("vitk", 2, 0.1, True, None, None, "/tmp")  # onnx None
        self.assertFalse(compare.has_ort_side(rows[0], s))
        results = compare.measure(rows, s, 1, lambda m: None,
                                  lambda r, s: (1.0, run_measured(["true"]), None),
                                  lambda spec: (1.0, run_measured(["true"]), ""),
                                  lambda spec: self.fail("ONNX Runtime ran"))
        self.assertTrue(all(r.ort is None for r in results))

    def test_vitk_runs_the_exported_weights_imported_and_quantised(self):
        rows = {r.key: r for r in compare.make_rows(False)}  # full sizes: 224 and 384
        onnx = {224: compare.OnnxModel("/c/vit-224.onnx", None, "/c/vit-224.safetensors"),
                384: compare.OnnxModel("/c/vit-384.onnx", None, "/c/vit-384.safetensors"),
                512: compare.OnnxModel("/c/vit-512.onnx", "export failed")}  # no weights
        ran = []

        def runner(cmd):
            ran.append(cmd)
            if "/c/vit-384.safetensors" in cmd:
                raise subprocess.CalledProcessError(1, cmd, "", "vitk import: bad tensor")
            return run_measured(["true"])

        s = compare.Settings("vitk", 2, 0.1, False, None, None, "/w", onnx)
        s, lines = compare.prepare_vitk_files(s, lambda m: None, runner)
        self.assertEqual(ran[:2], [
            ["vitk", "import", "--format", "torchvision", "/c/vit-224.safetensors", "--out",
             "/w/vit-224.h5"],
            ["vitk", "quantize", "/w/vit-224.h5", "--out", "/w/vit-224-int8.h5"]])
        self.assertEqual(len(ran), 3)  # 384's import failed: no quantize; 512 has no weights
        self.assertEqual(set(s.vit_files), {224})
        self.assertIn("vitk import --format torchvision", lines[0])
        self.assertTrue(any("384x384: random weights" in line and "bad tensor" in line
                            for line in lines))
        # Each precision runs its own file; a size without files keeps random weights.
        f32 = compare.vitk_command(rows["vit-b16-224-b1"], s)
        self.assertEqual(f32[f32.index("--model") + 1], "/w/vit-224.h5")
        self.assertNotIn("--random-weights", f32)
        bf16 = compare.vitk_command(rows["vit-b16-224-b1-bf16"], s)
        self.assertEqual(bf16[bf16.index("--model") + 1], "/w/vit-224.h5")
        int8 = compare.vitk_command(rows["vit-b16-224-b1-int8"], s)
        self.assertEqual(int8[int8.index("--model") + 1], "/w/vit-224-int8.h5")
        self.assertEqual(int8[int8.index("--precision") + 1], "int8")
        self.assertIn("--random-weights", compare.vitk_command(rows["vit-b16-384-b1"], s))


def fake_node_script(directory, body):
    """A Python script standing in for run_vit.js (compare.NODE is set to python3)."""
    path = os.path.join(directory, "run_vit.py")
    with open(path, "w") as f:
        f.write("import json, sys\nspec = json.loads(sys.argv[1])\n" + body)
    return path


class OrtModels(unittest.TestCase):
    """Export and parity bookkeeping (prepare_onnx) with stand-ins for PyTorch and Node."""

    def args(self, *extra):
        return compare.parse_args(["--quick", *extra])[0]

    def test_specs_name_every_size_and_agree(self):
        rows = {r.key: r for r in compare.make_rows(False)}
        s = compare.Settings("vitk", 2, 10.0, False, None, None, "/tmp")
        a = compare.export_spec(rows["vit-b16-224-b1"], s, "/c")
        b = compare.export_spec(rows["vit-b16-224-b8"], s, "/c")
        c = compare.export_spec(rows["vit-b16-384-b1"], s, "/c")
        self.assertEqual(a, b)  # one model per image size: the batch axis is free
        self.assertNotEqual(a["model"], c["model"])
        self.assertTrue(a["model"].startswith("/c/vit_b_16-224px-"))
        self.assertIn(f"seed{compare.VIT_SEED}-opset14", a["model"])
        self.assertEqual(a["opset"], 14)
        tiny = compare.export_spec(
            next(r for r in compare.make_rows(True) if r.key == "vit-b16-224-b1"), s, "/c")
        self.assertNotEqual(os.path.basename(tiny["model"]), os.path.basename(a["model"]))
        check = compare.check_spec(a, s)
        self.assertEqual((check["mode"], check["model"], check["input"], check["reference"]),
                         ("check", a["model"], a["input"], a["reference"]))
        self.assertEqual((check["batch"], check["image_size"]), (2, 224))
        s = s._replace(onnx={224: compare.OnnxModel(a["model"], None)})
        spec = compare.ort_spec(rows["vit-b16-224-b8"], s)
        self.assertEqual((spec["model"], spec["batch"], spec["seconds"]), (a["model"], 8, 10.0))
        self.assertIsNone(compare.ort_spec(rows["vit-b16-384-b1"], s))

    def test_parity_limit(self):
        self.assertIsNone(compare.parity_problem(5e-6))
        self.assertIsNone(compare.parity_problem(1e-4))
        self.assertIn("differ from PyTorch's by up to 0.002", compare.parity_problem(2e-3))
        self.assertIn("NaN", compare.parity_problem(None))

    def test_prepare(self):
        rows = compare.select_rows(compare.make_rows(True), "vit-b16")
        exported, checked = [], []

        def exporter(spec):
            exported.append(spec["params"]["image_size"])
            if spec["params"]["image_size"] == 48:
                raise subprocess.CalledProcessError(
                    1, [sys.executable, "compare.py", "--onnx-export-child", "{...}"], "",
                    "torch.onnx.errors.UnsupportedOperatorError: no")
            return {"cached": False, "seconds": 3.0, "torch": "1.13"}, run_measured(["true"])

        diffs = {32: 3e-6}

        def checker(spec):
            checked.append(spec)
            return ({"max_abs_diff": diffs[spec["image_size"]], "version": "1.30.0"},
                    run_measured(["true"]))

        with tempfile.TemporaryDirectory() as tmp:
            s = compare.Settings("vitk", 2, 0.1, True, None, None, tmp)
            args = self.args("--onnx-dir", os.path.join(tmp, "onnx"))
            s2, lines = compare.prepare_onnx(args, s, rows, lambda m: None, exporter, checker)
            self.assertTrue(os.path.isdir(os.path.join(tmp, "onnx")))
        self.assertEqual(exported, [32, 48])  # once per image size, before any timing
        self.assertEqual([c["image_size"] for c in checked], [32])
        self.assertIsNone(s2.onnx[32].problem)
        self.assertIn("UnsupportedOperatorError", s2.onnx[48].problem)
        self.assertIn("SPEC", s2.onnx[48].problem)
        self.assertTrue(lines[0].startswith("ORT: ONNX Runtime 1.30.0 (onnxruntime-node), f32, "
                                            "2 intra-op threads, 1 inter-op, sequential"))
        self.assertIn("ONNX Runtime parity, 32x32: max |logit difference| against PyTorch "
                      "3.0e-06", lines[1])
        self.assertIn("ok", lines[1])
        self.assertIn("exported in 3 s", lines[1])
        self.assertIn("ONNX Runtime, 48x48: the ONNX export or parity check failed", lines[2])

        diffs[32] = 0.25  # a model that does not match is not timed
        with tempfile.TemporaryDirectory() as tmp:
            s = compare.Settings("vitk", 2, 0.1, True, None, None, tmp)
            s2, lines = compare.prepare_onnx(self.args("--onnx-dir", tmp), s,
                                             compare.select_rows(compare.make_rows(True),
                                                                 "vit-b16-224"),
                                             lambda m: None, exporter, checker)
        self.assertIn("FAILED", lines[1])
        self.assertIn("differ from PyTorch's by up to 0.25", s2.onnx[32].problem)
        self.assertIsNone(compare.ort_spec(rows[0], s2))

    def test_left_out(self):
        s = compare.Settings("vitk", 2, 0.1, True, None, None, "/tmp")
        never = lambda spec: self.fail("ran")  # noqa: E731
        rows = compare.make_rows(True)
        for args, rows in ((self.args("--no-onnxruntime"), rows),
                           (self.args(), compare.select_rows(rows, "mt"))):
            s2, lines = compare.prepare_onnx(args, s, rows, lambda m: None, never, never)
            self.assertIsNone(s2.onnx)
            self.assertEqual(lines, [])

    def test_node_answer(self):
        # run_ort reads the last line of the child's output, and its peak memory is its own.
        with tempfile.TemporaryDirectory() as tmp:
            script = fake_node_script(
                tmp, "b = bytearray(64 << 20)\nprint('warming up')\n"
                     "print(json.dumps({'value': 2.5 * spec['batch'], 'version': '9.9'}))\n")
            with mock.patch.object(compare, "NODE", sys.executable), \
                    mock.patch.object(compare, "ORT_SCRIPT", script):
                value, m, version = compare.run_ort({"mode": "time", "batch": 8})
                self.assertEqual((value, version), (20.0, "9.9"))
                self.assertGreater(m.peak_rss_mib, 64)
            script = fake_node_script(tmp, "sys.exit('run_vit.js: Error: no such file')\n")
            with mock.patch.object(compare, "NODE", sys.executable), \
                    mock.patch.object(compare, "ORT_SCRIPT", script):
                with self.assertRaises(subprocess.CalledProcessError) as e:
                    compare.run_ort({"mode": "time", "batch": 1})
            self.assertEqual(compare.failure_note("ONNX Runtime", e.exception),
                             f"ONNX Runtime failed: {sys.executable} {script} SPEC...: "
                             "run_vit.js: Error: no such file")


class OrtInstall(unittest.TestCase):
    """onnxruntime-node from the lockfile: pinned, installed by `npm ci --ignore-scripts` when
    missing (npm stands in here), a clear message when that fails; Node and npm as Debian
    packages when missing."""

    def package_dir(self, tmp, installed=None):
        with open(os.path.join(tmp, "package.json"), "w") as f:
            json.dump({"dependencies": {"onnxruntime-node": "1.30.0"}}, f)
        if installed:
            self.install(tmp, installed)
        return tmp

    @staticmethod
    def install(directory, version):
        target = os.path.join(directory, "node_modules", "onnxruntime-node")
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "package.json"), "w") as f:
            json.dump({"version": version}, f)

    def test_the_real_pin(self):
        with open(os.path.join(compare.ORT_DIR, "package.json")) as f:
            pinned = json.load(f)["dependencies"]["onnxruntime-node"]
        self.assertRegex(pinned, r"^\d+\.\d+\.\d+$")  # exact: no range
        with open(os.path.join(compare.ORT_DIR, "package-lock.json")) as f:
            lock = json.load(f)
        self.assertEqual(lock["packages"]["node_modules/onnxruntime-node"]["version"], pinned)
        self.assertEqual(compare.pinned_ort_version()[0], pinned)
        self.assertEqual(compare.ORT_INSTALL, ["npm", "ci", "--ignore-scripts"])
        self.assertTrue(os.path.exists(compare.ORT_SCRIPT))

    @unittest.skipUnless(shutil.which("git"), "no git")
    def test_node_modules_is_ignored(self):
        done = subprocess.run(["git", "-C", compare.ORT_DIR, "check-ignore", "-q",
                               os.path.join(compare.ORT_DIR, "node_modules", "x")])
        if done.returncode == 128:
            self.skipTest("not a git checkout")
        self.assertEqual(done.returncode, 0, "tests/bench/onnxruntime/node_modules not ignored")

    def test_installed_and_pinned_runs_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.package_dir(tmp, installed="1.30.0")
            self.assertEqual(compare.pinned_ort_version(tmp), ("1.30.0", "1.30.0"))
            with mock.patch.object(compare, "ORT_INSTALL", ["false"]):
                compare.ensure_onnxruntime(tmp, log=self.fail)

    def test_missing_or_other_version_is_installed(self):
        for before in (None, "1.29.0"):
            with tempfile.TemporaryDirectory() as tmp:
                self.package_dir(tmp, installed=before)
                npm = [sys.executable, "-c",
                       "import json, os; os.makedirs('node_modules/onnxruntime-node', "
                       "exist_ok=True); json.dump({'version': '1.30.0'}, "
                       "open('node_modules/onnxruntime-node/package.json', 'w'))"]
                log = []
                with mock.patch.object(compare, "ORT_INSTALL", npm):
                    compare.ensure_onnxruntime(tmp, log=log.append)
                self.assertEqual(compare.pinned_ort_version(tmp), ("1.30.0", "1.30.0"))
                self.assertIn("installing it for ONNX Runtime's side", log[0])
                self.assertIn("not installed" if before is None else "is 1.29.0", log[0])

    def test_failure_says_what_to_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.package_dir(tmp)
            npm = [sys.executable, "-c", "import sys; sys.exit('npm error code ENOTFOUND')"]
            with mock.patch.object(compare, "ORT_INSTALL", npm):
                with self.assertRaises(SystemExit) as e:
                    compare.ensure_onnxruntime(tmp, log=lambda m: None)
            message = str(e.exception.code)
            self.assertIn("npm error code ENOTFOUND", message)
            self.assertIn(f"(cd {tmp} && {' '.join(npm)})", message)
            self.assertIn("--no-onnxruntime", message)
            with mock.patch.object(compare, "ORT_INSTALL", ["/nonexistent/npm", "ci"]):
                with self.assertRaises(SystemExit) as e:
                    compare.ensure_onnxruntime(tmp, log=lambda m: None)
            self.assertIn("cannot run npm", str(e.exception.code))

    def test_node_and_npm_are_debian_packages(self):
        rows = compare.make_rows(True)
        with mock.patch.object(compare.shutil, "which", return_value=None):
            self.assertTrue({"nodejs", "npm"} <= set(compare.missing_packages(rows, True)))
            self.assertNotIn("nodejs", compare.missing_packages(rows, False))
            self.assertNotIn("nodejs",
                             compare.missing_packages(compare.select_rows(rows, "mt"), True))
        with mock.patch.object(compare.shutil, "which", return_value="/usr/bin/x"):
            self.assertNotIn("nodejs", compare.missing_packages(rows, True))


class DryRun(unittest.TestCase):
    def dry_run(self, *args):
        return subprocess.run([sys.executable, COMPARE, "--dry-run", *args],
                              capture_output=True, text=True)

    def test_bf16_rows_follow_the_binary_s_help(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = self.dry_run("--quick", "--vitk", fake_vitk(tmp, {"classify": BF16})).stdout
            self.assertIn("vit-b16-224-b1-bf16: vitk: ", out)
            self.assertIn("--precision bf16", out)
            self.assertIn("vit-train-bf16: left out: `vitk train --help` lists no bf16 for "
                          "--precision: this binary has no bf16 path", out)
            self.assertIn("mt-train-bf16: left out", out)
            # A binary before int8: its rows are left out, each with the subcommand asked.
            self.assertIn("vit-b16-224-b1-int8: left out: `vitk classify --help` lists no int8 "
                          "for --precision", out)
            self.assertIn("mt-greedy-int8: left out: `vitk translate --help` lists no int8", out)
            self.assertNotIn("int8 products", out)  # no int8 row, no note
            for key in ("vit-b16-224-b1", "vit-train", "mt-train", "mt-greedy", "mt-beam4"):
                self.assertIn(f"{key}: vitk: ", out)
            self.assertIn("placeholder model: ", out)
            self.assertIn("mt-greedy: PyTorch child: ", out)
            self.assertNotIn("mt-beam4: PyTorch child", out)  # compared with the greedy loop
            out = self.dry_run("--quick", "--vitk", fake_vitk(
                tmp, {"classify": INT8, "train": BF16, "mt-train": BF16, "translate": INT8})).stdout
            self.assertNotIn("left out", out)

    def test_int8_rows_follow_the_binary_s_help_not_the_cpu(self):
        # A CPU without bf16 nor VNNI: the bf16 rows are left out, the int8 rows run (on 7-bit
        # activation codes, which their note says).
        env = "cpu isa: avx2\nbf16: no\nint8: no VNNI (7-bit activations)\n"
        with tempfile.TemporaryDirectory() as tmp:
            vitk = fake_vitk(tmp, {"classify": INT8, "translate": BF16, "train": BF16}, env)
            done = self.dry_run("--quick", "--vitk", vitk, "--only", "vit-b16-224-b1,mt-greedy",
                                "--no-onnxruntime")
        self.assertEqual(done.returncode, 0, done.stderr)
        out = done.stdout
        self.assertIn("vit-b16-224-b1-bf16: left out: this CPU has no bf16 products", out)
        self.assertIn("vit-b16-224-b1-int8: vitk: ", out)
        self.assertIn("--batch-size 1 ", out)
        self.assertRegex(out, r"vit-b16-224-b1-int8: vitk: .*classify --benchmark .*"
                              r"--precision int8\n")
        self.assertNotIn("vit-b16-224-b1-int8: PyTorch child", out)  # the f32 row's
        self.assertIn("mt-greedy-int8: left out: `vitk translate --help` lists no int8", out)
        table = out[out.index("\nrow "):].splitlines()
        int8 = next(line for line in table if line.startswith("tiny ViT 32 batch 1 int8"))
        note = "int8 products (`vitk env`): no VNNI (7-bit activations)"
        self.assertIn(f"[1] {note}", table)
        self.assertTrue(int8.startswith("tiny ViT 32 batch 1 int8 [1]"), int8)
        self.assertEqual(sum(note in line for line in table), 1)
        self.assertIn("left out: mt-greedy-int8: ", out)

        # With the translate side too, on a CPU with VNNI: the decoding rows' int8 commands.
        with tempfile.TemporaryDirectory() as tmp:
            vitk = fake_vitk(tmp, {"classify": INT8, "translate": INT8})
            out = self.dry_run("--quick", "--vitk", vitk, "--only", "mt-beam4").stdout
        self.assertRegex(out, r"mt-beam4-int8: vitk: .*translate .*--beam-size 4 "
                              r"--length-penalty 0\.6 --precision int8\n")
        self.assertIn("int8 products (`vitk env`): VNNI (8-bit activations)", out)
        self.assertNotIn("left out", out)

    def test_only_markdown_and_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            vitk = fake_vitk(tmp, {})
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

    def test_onnxruntime_side(self):
        with tempfile.TemporaryDirectory() as tmp:
            vitk, cache = fake_vitk(tmp, {}), os.path.join(tmp, "onnx")
            done = self.dry_run("--quick", "--vitk", vitk, "--only", "vit-b16,mt-train",
                                "--onnx-dir", cache)
            self.assertEqual(done.returncode, 0, done.stderr)
            out = done.stdout
            self.assertFalse(os.path.exists(cache))  # a dry run exports nothing
        self.assertTrue(out.startswith("vitk against PyTorch and ONNX Runtime, "))
        for size in (32, 48):
            self.assertIn(f"ONNX export {size}: ", out)
            self.assertIn(f"ONNX parity {size}: node ", out)
        self.assertIn("--onnx-export-child", out)
        self.assertIn(os.path.join(cache, "vit-32px-"), out)
        for key in ("vit-b16-224-b1", "vit-b16-224-b8", "vit-b16-384-b1"):
            self.assertIn(f"{key}: ONNX Runtime: node ", out)
        self.assertIn('"mode": "time"', out)
        self.assertNotIn("mt-train: ONNX Runtime", out)
        table = out[out.index("\nrow "):]
        self.assertIn("vitk/ORT", table)
        with tempfile.TemporaryDirectory() as tmp:
            out = self.dry_run("--quick", "--vitk", fake_vitk(tmp, {}), "--only",
                               "vit-b16,mt-train", "--no-onnxruntime").stdout
        self.assertTrue(out.startswith("vitk against PyTorch, "))
        self.assertNotIn("ONNX", out)
        self.assertNotIn("ORT", out)

    @unittest.skipUnless(os.environ.get("VITK_BINARY"), "VITK_BINARY not set")
    def test_with_the_built_vitk(self):
        done = self.dry_run("--quick", "--vitk", os.environ["VITK_BINARY"])
        self.assertEqual(done.returncode, 0, done.stderr)
        for key in ("vit-b16-224-b1", "vit-train", "mt-train", "mt-greedy", "mt-beam4"):
            self.assertIn(f"{key}: vitk: ", done.stdout)
        # The binary lists int8 for classify and translate, and `vitk env` says which mode.
        for key in ("vit-b16-224-b1-int8", "vit-b16-384-b1-int8", "mt-greedy-int8",
                    "mt-beam4-int8"):
            self.assertIn(f"{key}: vitk: ", done.stdout)
        self.assertRegex(done.stdout, r"\n\[\d+\] int8 products \(`vitk env`\): "
                                      r"(VNNI \(8-bit|no VNNI \(7-bit) activations\)\n")


if __name__ == "__main__":
    unittest.main()
