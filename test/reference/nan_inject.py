#!/usr/bin/env python3
"""Sets one element of one tensor of a safetensors file to NaN, in place:
  nan_inject.py FILE TENSOR FLAT_INDEX
For tests that show a comparison fails on a non-finite value."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from dtcref import safetensors  # noqa: E402

path, name, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
tensors, meta = safetensors.read(path)
values = tensors[name].copy()
values.reshape(-1)[index] = np.nan
tensors[name] = values
safetensors.write(path, tensors, meta)
