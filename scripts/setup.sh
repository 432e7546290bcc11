#!/usr/bin/env bash
# Installs every system package dtc needs to build, test and run on Debian 12.
# Idempotent: when everything is present it only checks (no apt-get update).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3
  python3-numpy
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  openmpi-bin libopenmpi-dev
  libopenblas-dev libdnnl-dev
  nlohmann-json3-dev
  libgtest-dev
  coinor-libcbc-dev
  clang-format-22               # the tree's style (.clang-format; test/lint checks it)
  clang-22 libclang-rt-22-dev   # libFuzzer targets (test/fuzz), ASan/UBSan builds
  libomp-22-dev                 # OpenMP for the fuzz build's CPU kernels (clang)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
