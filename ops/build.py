"""Build the compiled edge op ahead of time: python -m ops.build [--cuda].

For CI and cluster login nodes: later runs find the build in the cache and start at once.
--cuda builds the CUDA library too, which needs nvcc and a CUDA build of torch but no GPU.
"""

from __future__ import annotations

import argparse
import sys

from .library import OpsBuildError, build_cuda_library, cache_root, load_cpu_library


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.build", description=__doc__.splitlines()[0])
    parser.add_argument("--cuda", action="store_true", help="also build the CUDA library (needs nvcc)")
    args = parser.parse_args(argv)
    print(f"build cache: {cache_root()}")
    try:
        built = [load_cpu_library()]
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
