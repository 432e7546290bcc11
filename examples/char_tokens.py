#!/usr/bin/env python3
"""Turns a text file into a byte-level token file for `dtc run --data`.

  char_tokens.py /usr/share/common-licenses/GPL-3 -o gpl3.tokens

Every byte of the file is one token (vocabulary 256), written as raw
little-endian uint16 (nanoGPT's format; `dtc run --data-dtype uint16`).
"""
import argparse
import array
import sys


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="text file")
    p.add_argument("-o", "--output", required=True, help="token file to write")
    a = p.parse_args(argv)
    with open(a.input, "rb") as f:
        data = f.read()
    if not data:
        p.error(f"{a.input} is empty")
    tokens = array.array("H", list(data))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(a.output, "wb") as f:
        tokens.tofile(f)
    print(f"{a.output}: {len(tokens)} tokens (byte-level, vocabulary 256)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
