"""What the benchmark scripts share: the repository root and running a
command that must succeed."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd):
    """Runs `cmd`; returns its output (stdout and stderr), or exits with it."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout}")
    return proc.stdout
