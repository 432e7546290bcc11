#!/usr/bin/env python3
"""Prints fields of a JSON document (a file, or - for stdin: e.g. `dtc
inspect` output), one `PATH = VALUE` line each, VALUE as compact JSON with
sorted keys. PATH is dot-separated: object keys, list indices, or in a list
of objects the `name` of the element (`tensors.fc1.weight.sharding` is not
ambiguous: the longest name that matches wins)."""
import json
import sys


def lookup(value, parts):
    if not parts:
        return value
    if isinstance(value, dict):
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if key in value:
                return lookup(value[key], parts[n:])
    elif isinstance(value, list):
        if parts[0].isdigit():
            return lookup(value[int(parts[0])], parts[1:])
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            for item in value:
                if isinstance(item, dict) and item.get("name") == name:
                    return lookup(item, parts[n:])
    raise KeyError(".".join(parts))


doc = json.load(sys.stdin if sys.argv[1] == "-" else open(sys.argv[1]))
for path in sys.argv[2:]:
    try:
        found = json.dumps(lookup(doc, path.split(".")), sort_keys=True, separators=(",", ":"))
    except KeyError as e:
        sys.exit(f"json_fields: no {e.args[0]!r} in {path!r}")
    print(f"{path} = {found}")
