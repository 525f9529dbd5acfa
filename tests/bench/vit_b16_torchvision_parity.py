#!/usr/bin/python3
"""Full-size import check (not run by CI): torchvision's vit_b_16 with fixed random weights, saved
as .safetensors, imported with `vitk import --format torchvision`, run by vitk at 224 and, with its
position embeddings resampled, at 384, against PyTorch's logits.

    /usr/bin/python3 tests/bench/vit_b16_torchvision_parity.py --build build

Needs Debian's python3-torch, python3-torchvision and python3-h5py, a built vitk and its test
binary (the C++ half is the disabled test ImportBench.DISABLED_LogitsFromEnvironment in
tests/tools/test_import.cpp). Uses about 2 GB of memory and 1 GB of disk in --work (default: a
temporary directory, removed afterwards unless --keep).

Cases:
  224             the imported checkpoint at its own size;
  384             the same checkpoint run at 384 (vitk's load_vit resamples, align_corners=True)
                  against torchvision's interpolate_embeddings(384) + vit_b_16(image_size=384);
  384_imported    `vitk import --image-size 384` (resampled at import) against the same.
PyTorch's reference is computed in float64 from the float32 weights; PyTorch's own float32 result
is reported next to vitk's for scale.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
from torchvision.models import vit_b_16
from torchvision.models.vision_transformer import interpolate_embeddings

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "parity"))
from make_import_fixtures import randomize, write_safetensors  # noqa: E402


def torch_logits(model, x):
    """(float64 reference, PyTorch's float32 result) of one model on x."""
    with torch.no_grad():
        f32 = model.float().eval()(x).double()
        f64 = model.double().train()(x.double())  # train(): no fast path; dropout is 0
        model.float()
    return f64.float(), f32


def run(cmd, env=None):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    start = time.time()
    done = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    print(f"  ({time.time() - start:.1f} s)")
    return done.stdout


def vitk_errors(tests, checkpoint, data):
    env = dict(os.environ, VITK_PARITY_CHECKPOINT=str(checkpoint), VITK_PARITY_DATA=str(data))
    out = run([tests, "--gtest_also_run_disabled_tests",
               "--gtest_filter=ImportBench.DISABLED_LogitsFromEnvironment"], env)
    found = dict(re.findall(r"\[ parity \] (\S+): max \|logit error\| (\S+)", out))
    return {k: float(v) for k, v in found.items()}


def write_data(path, cases):
    with h5py.File(path, "w") as f:
        for name, (x, logits, align) in cases.items():
            f.create_dataset(f"input/{name}", data=x.numpy())
            f.create_dataset(f"logits/{name}", data=logits.numpy())
            f.create_dataset(f"align/{name}", data=np.array([int(align)], np.int32))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=pathlib.Path, default=ROOT / "build",
                        help="the build directory (vitk and tests/vitk_tests)")
    parser.add_argument("--work", type=pathlib.Path, help="where to write the large files")
    parser.add_argument("--keep", action="store_true", help="keep --work afterwards")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest absolute logit error accepted (exit 1 above it)")
    args = parser.parse_args()
    vitk = args.build / "vitk"
    tests = args.build / "tests" / "vitk_tests"
    for f in (vitk, tests):
        if not f.exists():
            sys.exit(f"{f} not found: build vitk first (or give --build)")
    work = args.work or pathlib.Path(tempfile.mkdtemp(prefix="vitk_b16_"))
    work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)

    try:
        gen = torch.Generator().manual_seed(args.seed)
        model = vit_b_16()
        randomize(model, gen)  # torchvision's own init has a zero head
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        st = work / "vit_b_16.safetensors"
        write_safetensors(st, state, {"format": "pt"})
        print(f"{st}: {st.stat().st_size / 1e6:.0f} MB, "
              f"{sum(v.numel() for v in state.values()) / 1e6:.1f}M parameters")

        x224 = torch.randn(args.batch, 3, 224, 224, generator=gen)
        x384 = torch.randn(args.batch, 3, 384, 384, generator=gen)
        ref224, f32_224 = torch_logits(model, x224)
        model384 = vit_b_16(image_size=384)
        model384.load_state_dict(interpolate_embeddings(384, 16, dict(state)))
        ref384, f32_384 = torch_logits(model384, x384)
        torch_f32 = {"224": (f32_224 - ref224.double()).abs().max().item(),
                     "384": (f32_384 - ref384.double()).abs().max().item()}
        scale = max(ref224.abs().max().item(), ref384.abs().max().item())

        ckpt = work / "vit_b_16.h5"
        print(run([vitk, "import", "--format", "torchvision", st, "--out", ckpt]))
        data = work / "cases.h5"
        write_data(data, {"224": (x224, ref224, True), "384": (x384, ref384, True)})
        errors = vitk_errors(tests, ckpt, data)

        ckpt384 = work / "vit_b_16_384.h5"
        print(run([vitk, "import", "--format", "torchvision", st, "--out", ckpt384,
                   "--image-size", "384"]))
        data384 = work / "cases384.h5"
        write_data(data384, {"384_imported": (x384, ref384, True)})
        errors.update(vitk_errors(tests, ckpt384, data384))
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\nvit_b_16, random weights (seed {args.seed}), batch {args.batch}, "
          f"max |logit| {scale:.3f}; reference: PyTorch float64")
    worst = 0.0
    for name in ("224", "384", "384_imported"):
        if name not in errors:
            sys.exit(f"no result for case {name}")
        err = errors[name]
        worst = max(worst, err)
        print(f"  {name:13s} vitk max |logit error| {err:.3g}   "
              f"(PyTorch float32: {torch_f32[name.split('_')[0]]:.3g})")
    if worst > args.tolerance:
        print(f"FAILED: {worst:.3g} > tolerance {args.tolerance:g}")
        return 1
    print(f"passed: within {args.tolerance:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
