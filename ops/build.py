"""Build the compiled edge op ahead of time, or say where it would come from.

    python -m ops.build [--cuda]     build (or find) the JIT libraries
    python -m ops.build --info       what would be loaded, from where, and why

For CI and cluster login nodes: later runs find the build in the cache and start at once.
--cuda builds the CUDA library too, which needs nvcc and a CUDA build of torch but no GPU. A
wheel built with the op (setup.py) ships the libraries, and --info says whether
this torch may load them.
"""

from __future__ import annotations

import argparse
import logging
import sys

import torch

from .library import OpsBuildError, build_cuda_library, cache_root, load, where_from


def info() -> int:
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}); GPU visible: {torch.cuda.is_available()}")
    print(f"JIT cache: {cache_root()}")
    for kind in ("cpu", "cuda"):
        try:
            source, path, reason = where_from(kind)
        except OpsBuildError as error:
            print(f"{kind}: cannot be loaded or built here: {error}")
            continue
        note = "" if kind == "cpu" or torch.cuda.is_available() else " (loaded only where a GPU is visible)"
        print(f"{kind}: {source}: {path}{note}")
        print(f"  why: {reason}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.build", description=__doc__.splitlines()[0])
    parser.add_argument("--cuda", action="store_true", help="also build the CUDA library (needs nvcc)")
    parser.add_argument("--info", action="store_true", help="say what would be loaded, from where, and why")
    args = parser.parse_args(argv)
    if args.info:
        return info()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the loader's "building ..." and "built in"
    print(f"build cache: {cache_root()}")
    try:
        built = [load("cpu")]
        if args.cuda:
            built.append(build_cuda_library())
    except OpsBuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for lib in built:
        print(f"ready {lib.name}: {lib.path} ({lib.seconds:.1f} s to build or load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
