#!/usr/bin/python3
"""Fits Q(t), the polynomial of GELU's erfc in common/ops/activation.cpp, and checks it in f32.

erfc(z) = t · exp(−z²) · Q(t) with t = 1 / (1 + z/2), so Q(t) = erfc(z)·exp(z²)/t, a smooth
function of t on [0, 1] (1/(2√π) at t = 0, 1 at t = 1). The fit minimises the largest relative
error on Chebyshev nodes (least squares reweighted by Lawson's rule), with the reference computed
by mpmath at 30 digits, then evaluates the f32-rounded coefficients by Horner's rule in f32.

  /usr/bin/python3 common/ops/fit_gelu_poly.py [--degree 10]

Needs python3-numpy and python3-mpmath (Debian); prints the coefficients, lowest degree first,
and the errors.
"""
import argparse

import mpmath as mp
import numpy as np


def q_exact(t):
    t = mp.mpf(float(t))
    if t == 0:
        return 1 / (2 * mp.sqrt(mp.pi))
    z = 2 * (1 / t - 1)
    return mp.erfc(z) * mp.exp(z * z) / t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degree", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--iterations", type=int, default=60)
    args = parser.parse_args()
    mp.mp.dps = 30

    ts = (1 - np.cos(np.linspace(0, np.pi, args.nodes))) / 2
    want = np.array([float(q_exact(t)) for t in ts])
    vander = np.vander(ts, args.degree + 1, increasing=True)
    weights = np.ones_like(ts)
    for _ in range(args.iterations):
        scale = weights / want  # relative error, weighted
        coef, *_ = np.linalg.lstsq(vander * scale[:, None], want * scale, rcond=None)
        rel = (vander @ coef - want) / want
        weights = weights * np.sqrt(np.abs(rel)) + 1e-30
        weights /= weights.max()
    rel = (vander @ coef - want) / want
    print(f"degree {args.degree}: max relative error {np.abs(rel).max():.3g} (double)")

    c32 = coef.astype(np.float32)
    grid = np.linspace(0, 1, 20001).astype(np.float32)
    q = np.full_like(grid, c32[-1])
    for c in c32[-2::-1]:
        q = (q * grid + c).astype(np.float32)
    exact = np.array([float(q_exact(t)) for t in grid])
    rel32 = np.abs((q.astype(np.float64) - exact) / exact).max()
    print(f"f32 coefficients, f32 Horner: max relative error {rel32:.3g} "
          f"({rel32 / 2.0**-24:.2f} ulp of 2^-24)")
    print("coefficients, t^0 first:")
    for c in c32:
        print(f"  {float(c):.9g}f")


if __name__ == "__main__":
    main()
