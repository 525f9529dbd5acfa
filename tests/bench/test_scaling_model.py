#!/usr/bin/python3
"""ctest: tests/bench/scaling_model.py without timing anything: the all-reduce, fit and
efficiency arithmetic, the parser of `vitk bench vit-step|mt-step`, and a run end to end on a
stand-in for vitk whose step time is a known line in the batch.

    /usr/bin/python3 tests/bench/test_scaling_model.py [-v]
"""
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scaling_model  # noqa: E402

VIT_OUTPUT = (
    "vit-step model: ViT, 224x224x3 images, patch 16 (197 tokens), d_model 384, 12 layers, 6 heads, "
    "d_ff 1536, 1000 classes; 22050664 parameters (88.2 MB of f32 gradients per step)\n"
    "vit-step: batch 16, f32, 2 threads: best 4000.0 ms/step (4.0 images/s), median 4100.0 "
    "ms/step; best 7800.0 CPU ms/step\n")

# A stand-in for vitk: per thread, 0.5 s + 1.5 s an image (ViT) or 10 ms a target token, wall
# and CPU time alike, on 2 threads.
FAKE_VITK = r"""#!/bin/sh
[ "$1" = --version ] && { echo "vitk 0.0 (stand-in)"; exit 0; }
[ "$1" = env ] && { printf 'threads: 2\ncpu isa: avx9_stand_in\n'; exit 0; }
b=1; len=1; prev=
for x in "$@"; do
  [ "$prev" = --batch-size ] && b=$x
  [ "$prev" = --length ] && len=$x
  prev=$x
done
case "$2" in
  vit-step) ms=$((500 + 1500 * b)); p=22050664;;
  mt-step) ms=$((500 + 10 * b * len)); p=63082496;;
  *) exit 2;;
esac
echo "$2 model: stand-in; $p parameters (0 MB of f32 gradients per step)"
echo "$2: batch $b, f32, 2 threads: best $ms.0 ms/step (1 images/s), median $ms.0 ms/step; best $((2 * ms)).0 CPU ms/step"
"""


class Arithmetic(unittest.TestCase):
    def test_ring_allreduce_is_twice_the_bytes_at_large_n(self):
        # 100 MB over 10 Gbit/s is 0.08 s; a ring moves 2(N-1)/N of it.
        self.assertAlmostEqual(scaling_model.ring_allreduce_seconds(1e8, 2, 10), 0.08)
        self.assertAlmostEqual(scaling_model.ring_allreduce_seconds(1e8, 4, 10), 0.12)
        self.assertAlmostEqual(scaling_model.ring_allreduce_seconds(1e8, 64, 100),
                               2 * 63 / 64 * 0.008)

    def test_allreduce_over_tcp_adds_wire_overhead_and_latency_steps(self):
        # TCP's share of the wire slows the bandwidth term; each bucket pays 2 log2(N) latencies.
        share = scaling_model.TCP_PAYLOAD_SHARE
        self.assertAlmostEqual(scaling_model.allreduce_seconds(1e8, 2, 10), 0.08 / share)
        self.assertAlmostEqual(scaling_model.allreduce_seconds(1e8, 2, 10, 0.001, 3),
                               0.08 / share + 3 * 2 * 0.001)
        self.assertAlmostEqual(scaling_model.allreduce_seconds(1e8, 8, 10, 0.001, 1),
                               0.14 / share + 6 * 0.001)
        self.assertAlmostEqual(scaling_model.allreduce_seconds(1e8, 5, 10, 0.001, 1),
                               0.128 / share + 6 * 0.001)  # 5 ranks: 3 halving steps
        self.assertEqual(scaling_model.allreduce_seconds(1e8, 1, 10, 0.001, 4), 0.0)

    def test_efficiency_with_and_without_overlap(self):
        self.assertAlmostEqual(scaling_model.efficiency(3.0, 1.0, overlap=False), 0.75)
        self.assertAlmostEqual(scaling_model.efficiency(3.0, 1.0, overlap=True), 1.0)  # hidden
        # 2 s of backward hide 2 of the 5 s: 3 s exposed.
        self.assertAlmostEqual(scaling_model.efficiency(3.0, 5.0, overlap=True), 0.5)

    def test_fit_through_two_points(self):
        fixed, per_unit = scaling_model.fit_line([8, 16], [4.5, 8.5])
        self.assertAlmostEqual(fixed, 0.5)
        self.assertAlmostEqual(per_unit, 0.5)
        # Noise that would make the fixed part negative: proportional to the larger batch.
        self.assertEqual(scaling_model.fit_line([8, 16], [4.5, 10.0]), (0.0, 10.0 / 16))

    def test_summary_says_when_noise_left_no_fixed_part(self):
        points = [scaling_model.Point(8, 6.0, 4.0, 2, 100.0, ""),
                  scaling_model.Point(16, 14.0, 8.5, 2, 200.0, "")]
        fixed, per_unit = scaling_model.fit_line([8, 16], [2.0, 4.25])
        fit = scaling_model.Fit(1000, points, fixed, per_unit, True)
        row = scaling_model.summary([scaling_model.MODELS[0]], {"ViT-S/16 @224": fit})[2]
        self.assertIn("| 8 images: 6.00 (2.00), 16 images: 14.00 (4.25) | none (noise: a line "
                      "through 0) | 0.2656 | 200 |", row)

    def test_batch_for_a_compute_time(self):
        self.assertEqual(scaling_model.batch_for(10.0, 1.0, 0.5), 10)  # 0.5 + 9.5 images
        self.assertEqual(scaling_model.batch_for(0.1, 1.0, 0.5), 1)


class Parser(unittest.TestCase):
    def test_reads_parameters_and_times(self):
        self.assertEqual(scaling_model.parse_step_bench(VIT_OUTPUT), (22050664, 4.0, 4.1, 7.8, 2))

    def test_refuses_output_without_figures(self):
        with self.assertRaises(ValueError):
            scaling_model.parse_step_bench("vit-step: something else\n")


class EndToEnd(unittest.TestCase):
    def test_quick_run_on_a_stand_in(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "vitk")
            with open(fake, "w") as f:
                f.write(FAKE_VITK)
            os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
            out = subprocess.run([sys.executable, os.path.join(HERE, "scaling_model.py"),
                                  "--quick", "--vitk", fake, "--speedup", "1,16"],
                                 capture_output=True, text=True, check=True).stdout
        prose = " ".join(out.split())  # the prose is wrapped at 100 columns
        self.assertIn("(avx9_stand_in), ", prose)
        self.assertIn("vitk 0.0 (stand-in)", prose)
        self.assertIn("`OMP_WAIT_POLICY=passive vitk bench vit-step --config configs/vit-s16.ini "
                      "--batch-size 2 ", out)
        # The fit finds the stand-in's line: 0.5 s fixed, 1.5 s an image.
        self.assertIn("| ViT-S/16 @224 | 22,050,664 | 88.2 | 1 image: 2.00 (2.00), 2 images: "
                      "3.50 (3.50) | 0.50 | 1.5 |", out)
        # 0.5 + 128 x 1.5 = 192.5 s per step; 12.0 s on ranks 16 times as fast.
        # 0.5 + 32 x 1.5 = 48.5 s for ViT-B/16, 0.5 + 25,000 x 0.01 = 250.5 s for the Transformer.
        self.assertIn("Compute per step at the per-rank batch: ViT-S/16 @224 192.5 s, ViT-B/16 @384 "
                      "48.5 s, Transformer-base 250.5 s.", prose)
        self.assertIn("Compute per step at the per-rank batch: ViT-S/16 @224 12.0 s,", prose)
        self.assertIn("### Ranks 16 times as fast as this machine", out)
        # One row per model and N, for each speed-up.
        self.assertEqual(sum(line.startswith("|  | 64 |") for line in out.splitlines()), 6)
        self.assertIn("| ViT-S/16 @224 | 2 | 0.0706 | 0.0282 | 0.00706 |", out)
        # At 16 times the speed a step takes 0.031 s + 0.094 s an image; 88.2 MB over 64 ranks
        # at 10 Gbit/s take 2 x 63/64 x 0.0706 = 0.139 s: 90% needs 9 x 0.139 = 1.25 s of
        # compute, just over 13 images; 2/3 of the compute hides it from 2 images on.
        self.assertIn("| ViT-S/16 @224 | 14 images | 6 images | 2 images | 2 images | 1 image |",
                      out)


if __name__ == "__main__":
    unittest.main()
