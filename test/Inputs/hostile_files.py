"""Writes files made to break a reader, for the command-line tests.

  hostile_files.py deep-artifact OUT    a .dtc whose container is valid (length,
                                         FNV-1a hash) but whose JSON nests
                                         100,000 levels deep
  hostile_files.py flip FILE OFFSET     flips one bit of FILE's byte at OFFSET
                                         (negative: from the end)
"""
import sys


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    what = sys.argv[1]
    if what == "deep-artifact":
        body = b'{"format":"dtc-artifact","version":1,"x":' + b"[" * 100000 + b"]" * 100000 + b"}"
        head = b"dtc-artifact 1 %d %016x\n" % (len(body), fnv1a64(body))
        with open(sys.argv[2], "wb") as f:
            f.write(head + body)
    elif what == "flip":
        with open(sys.argv[2], "r+b") as f:
            data = bytearray(f.read())
            at = int(sys.argv[3]) % len(data)
            data[at] ^= 0x01
            f.seek(0)
            f.write(data)
    else:
        sys.exit("unknown command " + what)


if __name__ == "__main__":
    main()
