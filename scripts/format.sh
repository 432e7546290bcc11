#!/usr/bin/env bash
# Formats every C++ and CUDA source of the tree with clang-format 22 in the
# style of .clang-format (LLVM). `scripts/format.sh --check` only reports
# the files that differ and exits 1 if there are any.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clang_format=${CLANG_FORMAT:-clang-format-22}
command -v "$clang_format" >/dev/null || {
  echo "format: $clang_format not found (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.cpp' '*.h' '*.cuh' '*.cu' |
  grep -v '^test/mutations/' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$clang_format" "$f" | cmp -s - "$f"; then echo "format: $f is not formatted"; bad=1; fi
  done
  [ $bad = 0 ] && echo "format: ${#files[@]} files formatted"
  exit $bad
fi
"$clang_format" -i "${files[@]}"
