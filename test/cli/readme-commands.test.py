"""readme-commands.test's helpers.

  commands README.md EXAMPLES   the README's "Using it" block as a script:
                                the GPT lines (generate, tokenize, compile,
                                run), build/bin/ dropped (lit's PATH has the
                                tools), --steps and --save-every divided by 10
  check LOG CHECKPOINT STEP     the log's steps and the checkpoint's dtc.step
"""
import json
import re
import struct
import sys


def commands(readme, examples):
    text = open(readme).read()
    block = text.split("## Using it", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    out = []
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or "llama" in line or " inspect " in line or " calibrate" in line:
            continue
        line = line.replace("build/bin/", "").replace("examples/", examples + "/")
        line = re.sub(r"--(steps|save-every) (\d+)",
                      lambda m: f"--{m.group(1)} {int(m.group(2)) // 10}", line)
        out.append(line)
    print("\n".join(out))


def check(log, checkpoint, step):
    steps = [json.loads(line)["step"] for line in open(log)]
    ok = steps == list(range(len(steps)))
    print(f"log: steps {steps[0]} to {steps[-1]}, "
          + ("each once, in order" if ok else f"NOT each once in order: {steps}"))
    with open(checkpoint, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n)).get("__metadata__", {})
    print(f"checkpoint: step {meta.get('dtc.step')}")
    if int(meta.get("dtc.step", -1)) != int(step):
        sys.exit(1)


if __name__ == "__main__":
    {"commands": commands, "check": check}[sys.argv[1]](*sys.argv[2:])
