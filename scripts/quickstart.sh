#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what dtc needs,
# build it, generate a small GPT, compile it for a 2x2 device mesh (the
# search chooses the plan for the 4 ranks) and train it on the GNU GPL (byte level) on CPU
# ranks (windows of the text in a shuffled order), printing the loss of
# every step and, every 50 steps, the loss on the held-out last tenth of the
# text. Outputs go to ${DTC_OUT:-out}/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"

out=${DTC_OUT:-$root/out}
steps=${DTC_STEPS:-200}
mkdir -p "$out"
dtc="${DTC_BUILD_DIR:-$root/build}/bin/dtc"

python3 examples/gen_model.py gpt --layers 2 --hidden 64 --heads 4 --seq 64 \
  --vocab 256 --batch 16 -o "$out/gpt.mlir"
# The last tenth of the text is held out for evaluation.
python3 examples/char_tokens.py /usr/share/common-licenses/GPL-3 -o "$out/gpl3.tokens" \
  --held-out 0.1 --held-out-output "$out/gpl3.held.tokens"
"$dtc" compile "$out/gpt.mlir" --mesh 2x2 --optimizer adamw --lr 2e-3 --grad-clip 1.0 \
  --summary --report "$out/gpt.report.json" -o "$out/gpt.dtc"
plan=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["planner"]["chose"])' "$out/gpt.report.json")
echo "compiled $out/gpt.dtc for mesh 2x2, plan $plan (report: $out/gpt.report.json); training:"
"$dtc" run "$out/gpt.dtc" --steps "$steps" --data "$out/gpl3.tokens" --shuffle --print-every 50 \
  --eval-data "$out/gpl3.held.tokens" --eval-every 50 \
  --log "$out/gpt.log.jsonl" --save "$out/gpt.safetensors"
echo "per-step log: $out/gpt.log.jsonl; parameters: $out/gpt.safetensors"
