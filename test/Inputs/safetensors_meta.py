"""Prints one metadata value of a safetensors file (KEY), or every key."""
import json
import struct
import sys

with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    meta = json.loads(f.read(n)).get("__metadata__", {})
print(meta.get(sys.argv[2]) if len(sys.argv) > 2 else json.dumps(meta, sort_keys=True))
