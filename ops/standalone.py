"""Run an exported network with torch and the segnet op library alone, as a deployment does.

    python ops/standalone.py deploy/model.pt2 [--inputs x.pt --outputs y.pt]

Loads the op library for the package's device and the package (its format and device from
model.json beside it), runs one input of the smallest accepted size, and prints the times as
JSON; with --inputs (a saved list of tensors) it saves the outputs for each. It fails if anything
of the training code (segnet, Hydra, Lightning, MONAI) was imported on the way: a package that
needs them would not deploy. segnet-export runs it after every export (command()).

It runs as a file, not with `python -m ops.standalone`: -m would import torch and ops before
main() starts timing their import.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

TRAINING_CODE = ("segnet", "hydra", "omegaconf", "lightning", "monai")
# Runs this file as __main__ with nothing imported ahead and the current folder, not ops/, first
# on sys.path (ops/library.py and its siblings must not shadow top-level modules).
_RUN_FILE = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def command(package: Path, *options: str) -> list[str]:
    """The command line that runs a package on its own in a fresh interpreter."""
    # faulthandler: a crash in the package's native code leaves the Python stack on stderr.
    return [sys.executable, "-X", "faulthandler", "-c", _RUN_FILE, __file__, str(package), *options]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", type=Path)
    parser.add_argument("--inputs", type=Path, help="a torch.save'd list of input tensors")
    parser.add_argument("--outputs", type=Path, help="where to torch.save the list of outputs")
    args = parser.parse_args()
    metadata = json.loads(args.package.with_suffix(".json").read_text())
    times = {}
    start = time.perf_counter()
    import torch

    import ops

    times["import_torch_and_ops"] = time.perf_counter() - start
    start = time.perf_counter()
    ops.load_compiled(metadata["device"])
    times["load_op_library"] = time.perf_counter() - start
    start = time.perf_counter()
    if metadata["format"] == "aoti":
        net = torch._inductor.aoti_load_package(str(args.package))
    else:
        net = torch.export.load(str(args.package)).module().to(metadata["device"])
    times["load_package"] = time.perf_counter() - start
    shape = metadata["input"]
    smallest = torch.zeros(1, shape["channels"], *shape["min_side"], device=metadata["device"])  # per axis
    start = time.perf_counter()
    with torch.no_grad():
        net(smallest)
        times["first_call"] = time.perf_counter() - start
        if args.inputs:
            torch.save([net(x.to(metadata["device"])).cpu() for x in torch.load(args.inputs)], args.outputs)
    imported = sorted({name.split(".")[0] for name in sys.modules} & set(TRAINING_CODE))
    if imported:
        print(f"error: running {args.package} imported training code: {', '.join(imported)}", file=sys.stderr)
        return 1
    print(json.dumps({"seconds": times}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
