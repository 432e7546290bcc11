#!/usr/bin/env python3
"""Turns a text file into a byte-level token file for `dtc run --data`.

  char_tokens.py /usr/share/common-licenses/GPL-3 -o gpl3.tokens
  char_tokens.py GPL-3 -o train.tokens --held-out 0.1 --held-out-output held.tokens

Every byte of the file is one token (vocabulary 256), written as raw
little-endian uint16 (nanoGPT's format; `dtc run --data-dtype uint16`).
With --held-out F the last fraction F of the text goes to
--held-out-output instead (for `dtc run --eval-data`), so the two files
share no token.
"""
import argparse
import array
import sys


def write(path, data):
    tokens = array.array("H", list(data))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as f:
        tokens.tofile(f)
    print(f"{path}: {len(tokens)} tokens (byte-level, vocabulary 256)")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="text file")
    p.add_argument("-o", "--output", required=True, help="token file to write")
    p.add_argument("--held-out", type=float, default=0.0, metavar="F",
                   help="fraction of the text, from its end, to hold out (0 <= F < 1)")
    p.add_argument("--held-out-output", metavar="FILE", help="token file of the held-out text")
    a = p.parse_args(argv)
    if not 0 <= a.held_out < 1:
        p.error(f"--held-out {a.held_out}: expected a fraction in [0, 1)")
    if (a.held_out > 0) != (a.held_out_output is not None):
        p.error("--held-out F and --held-out-output FILE go together")
    with open(a.input, "rb") as f:
        data = f.read()
    if not data:
        p.error(f"{a.input} is empty")
    cut = len(data) - int(len(data) * a.held_out)
    write(a.output, data[:cut])
    if a.held_out_output:
        write(a.held_out_output, data[cut:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
