"""What the PyTorch comparison scripts in tests/bench/ share."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VITK = os.path.join(ROOT, "build", "vitk")


def check_blas(script):
    """Exits unless PyTorch's BLAS is OpenBLAS (with Debian's reference BLAS PyTorch is several
    times slower, and a ratio against it would flatter vitk). Returns the library's path."""
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if "openblas" not in blas:
        sys.exit(f"{os.path.basename(script)}: PyTorch would use the reference BLAS ({blas}); "
                 "install OpenBLAS first: apt-get install libopenblas0-openmp")
    return blas


def torch_in_child(script):
    """Runs `script` again with --torch-child and returns the last number it prints. PyTorch's
    suite runs in a child process so that, once it exits, no idle PyTorch OpenMP threads spin
    beside vitk (a live PyTorch's idle thread team takes CPU from the next program for a while)."""
    out = subprocess.run([sys.executable, os.path.abspath(script)] + sys.argv[1:] +
                         ["--torch-child"], check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])
