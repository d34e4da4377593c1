#!/usr/bin/env bash
# Put into .whl/ the wheels scripts/gpu_check.sh needs on a GPU machine that has torch, nvcc,
# ninja, lightning and tensorboard but no monai or hydra-core, and no network. Run it where pip
# can download; PYTHON_VERSION is the GPU machine's Python (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${PYTHON_VERSION:-3.12}
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download --no-deps --only-binary=:all: --python-version "$version" --implementation cp "${platforms[@]}" \
  -d .whl monai==1.6.1 hydra-core==1.3.8 omegaconf==2.3.1 nibabel==5.4.2 importlib-resources==7.1.0
# antlr4-python3-runtime (needed by omegaconf) is published as source only: build its pure-python wheel.
python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
ls -l .whl
