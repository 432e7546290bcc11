# -*- Python -*-
import os
import platform

import lit.formats
from lit.llvm import llvm_config

config.name = "DTC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dtc_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "Inputs", "models", "reference", "lib"]

llvm_config.use_default_substitutions()
# mpirun needs a home and a temp dir; the e2e tests launch ranks.
# CUDA_VISIBLE_DEVICES: the devices the backend-cuda tests may use.
llvm_config.with_system_environment(["HOME", "TMPDIR", "USER", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES"])

config.substitutions.append(("%dtc_src", config.dtc_src_root))
config.substitutions.append(("%examples", os.path.join(config.dtc_src_root, "examples")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("%python", config.python_executable))
# The float64 reference (test/reference) and the Python that has numpy.
config.substitutions.append(("%refpython", config.reference_python))
config.substitutions.append(("%reference", os.path.join(config.test_source_root, "reference")))
# The end-to-end tests' shared helpers and hand-written models, one place for
# every feature folder of test/e2e (and the few other tests that use them).
config.substitutions.append(("%e2e_lib", os.path.join(config.test_source_root, "e2e", "lib")))
config.substitutions.append(("%e2e_models", os.path.join(config.test_source_root, "e2e", "models")))
config.substitutions.append(("%dtc_bin", config.dtc_tools_dir))
# No __pycache__ in the source tree.
config.environment["PYTHONDONTWRITEBYTECODE"] = "1"
# Plans under --hw cpu do not depend on whether this machine was calibrated
# (`dtc calibrate` writes ~/.cache/dtc by default): the tests see no
# calibration unless they point DTC_CACHE_DIR at their own.
config.environment["DTC_CACHE_DIR"] = os.path.join(config.test_exec_root, "no-calibration")
# The float64 reference's f32 runs measure the rounding noise the
# tolerances scale with (test/reference/dtcref/compare.py), and numpy's
# products run on OpenBLAS, which picks its kernels by CPU: the same dtc
# numbers were within 0.32 of their tolerances with its AVX2 kernels and
# 1.04 with its AVX-512 ones (e2e/tp/grouped-query-attention.test). One
# kernel, the AVX2 one, on every x86-64 machine (docs/testing.md).
if platform.machine() in ("x86_64", "AMD64"):
    config.environment["OPENBLAS_CORETYPE"] = "Haswell"

llvm_config.add_tool_substitutions(["dtc", "dtc-opt", "dtc-run"], [config.dtc_tools_dir])
# Prepended, dtc's tools first: FileCheck and friends from LLVM, everything
# else (grep, python3, mpirun) from the system PATH.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.dtc_tools_dir, append_path=True)

# Backends a test can ask for (`REQUIRES: backend-cuda`, `UNSUPPORTED:
# backend-cuda`). The CPU backend is always built. The CUDA one counts when
# the build has it and dtc-run can train one step of a tiny model on it;
# where the backend itself says it cannot run here (no device, no driver:
# its message ends in "use --backend cpu"), the tests that need it are
# UNSUPPORTED, with the reason noted once. Any other failure of the probe is
# a bug of the backend: the feature stays on so that those tests fail.
config.available_features.add("backend-cpu")


def cuda_backend_state():
    """(available, reason): can dtc-run train on the CUDA backend here?"""
    if not config.dtc_with_cuda:
        return False, "this build has no CUDA backend"
    import shutil
    import subprocess
    import tempfile

    tools = config.dtc_tools_dir
    probe = tempfile.mkdtemp(prefix="backend-probe-", dir=config.test_exec_root)
    try:
        artifact = os.path.join(probe, "probe.dtc")
        model = os.path.join(config.dtc_src_root, "examples", "models", "mlp.mlir")
        try:
            compiled = subprocess.run([os.path.join(tools, "dtc"), "compile", model, "-o", artifact],
                                      capture_output=True, text=True)
        except OSError as e:
            return False, f"the probe cannot run dtc ({e})"
        if compiled.returncode != 0:
            return False, "the probe did not compile: " + compiled.stderr.strip()
        try:
            ran = subprocess.run([os.path.join(tools, "dtc-run"), artifact, "--steps", "1",
                                  "--local-ranks", "1", "--backend", "cuda"],
                                 capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return True, "the probe timed out (the CUDA tests will show why)"
        if ran.returncode == 0:
            return True, ""
        if "use --backend cpu" in ran.stderr:
            return False, ran.stderr.strip()
        return True, "the probe failed (the CUDA tests will show why): " + ran.stderr.strip()
    finally:
        shutil.rmtree(probe, ignore_errors=True)


cuda_available, cuda_reason = cuda_backend_state()
if cuda_available:
    config.available_features.add("backend-cuda")
if cuda_reason:
    lit_config.note("backend-cuda: " + cuda_reason)
