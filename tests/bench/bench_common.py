"""What the PyTorch comparison scripts in tests/bench/ share. Standard library only: compare.py
imports it in a parent process that never imports PyTorch."""
import collections
import os
import subprocess
import sys
import tempfile
import time

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


# A finished child process: its output, wall time and peak resident memory.
Measured = collections.namedtuple("Measured", "returncode stdout stderr seconds peak_rss_mib")


def run_measured(cmd, check=True, env=None):
    """Runs cmd (a list) and returns a Measured. The peak resident memory is the child's own
    ru_maxrss, from os.wait4 on its pid: the kernel's high-water mark of that process's resident
    set (what /proc/PID/status shows as VmHWM just before it exits), exact and with no sampling.
    RUSAGE_CHILDREN after wait would instead give the largest of all children so far. Output goes
    through temporary files, since communicate() would reap the child before wait4 could."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait again
        out.seek(0)
        err.seek(0)
        result = Measured(proc.returncode, out.read().decode("utf-8", "replace"),
                          err.read().decode("utf-8", "replace"), seconds,
                          usage.ru_maxrss / 1024.0)  # Linux: KiB
    if check and result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise subprocess.CalledProcessError(result.returncode, cmd, result.stdout, tail)
    return result


def torch_in_child(script, args=None):
    """Runs `script` again with `args` (default: this process's arguments) and --torch-child, and
    returns the last number it prints. PyTorch's suite runs in a child process so that, once it
    exits, no idle PyTorch OpenMP threads spin beside vitk (a live PyTorch's idle thread team
    takes CPU from the next program for a while)."""
    args = sys.argv[1:] if args is None else args
    out = run_measured([sys.executable, os.path.abspath(script)] + args + ["--torch-child"]).stdout
    return float(out.split()[-1])
