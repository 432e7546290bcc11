# -*- Python -*-
import os

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
llvm_config.with_system_environment(["HOME", "TMPDIR", "USER", "LD_LIBRARY_PATH"])

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
# No __pycache__ in the source tree.
config.environment["PYTHONDONTWRITEBYTECODE"] = "1"

llvm_config.add_tool_substitutions(["dtc", "dtc-opt", "dtc-run"], [config.dtc_tools_dir])
# Prepended, dtc's tools first: FileCheck and friends from LLVM, everything
# else (grep, python3, mpirun) from the system PATH.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.dtc_tools_dir, append_path=True)
