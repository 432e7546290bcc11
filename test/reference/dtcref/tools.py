"""Running dtc from the reference's checks."""
import os
import subprocess
import tempfile


class DtcError(Exception):
    pass


def run(cmd, log=None, check=True):
    # Each command gets a TMPDIR of its own (a short path: Open MPI puts
    # Unix sockets there), removed afterwards. Concurrent mpiruns sharing
    # one $TMPDIR race on Open MPI's per-user session directory
    # (ORTE_ERROR_LOG ... session_dir.c) when tests run in parallel.
    with tempfile.TemporaryDirectory(prefix="dtc-") as tmp:
        env = dict(os.environ, TMPDIR=tmp)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if log:
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n" + proc.stdout)
    if check and proc.returncode != 0:
        raise DtcError(f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}")
    return proc.stdout


def losses_of(output):
    """The `step K loss X` lines: {K: X} (X may be nan or inf)."""
    out = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "step" and parts[2] == "loss":
            out[int(parts[1])] = float(parts[3])
    return out


def devices(mesh):
    n = 1
    for part in str(mesh).split("x"):
        n *= int(part)
    return n


def emit(dtc, model, stage, flags, work, tag="emit"):
    """The IR after `stage`, in generic form, as text."""
    artifact = os.path.join(work, f"{tag}.dtc")
    return run([dtc, "compile", model, "--emit-mlir", stage, "--emit-generic", "-o", artifact] + list(flags))
