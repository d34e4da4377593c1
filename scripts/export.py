"""Export a trained network for deployment, with torch.export and AOTInductor.

    python scripts/export.py ckpt_path=PATH [format=aoti|exported_program] [device=cpu|cuda] [output=model.pt2]

Writes the package and model.json (what prediction needs) beside it, then loads and runs the
package in a fresh process with torch and the op library alone (scripts/run_export.py), as the
target machine will, and logs how long that took. scripts/predict.py model=PATH.pt2 predicts
with it.
"""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from segnet.errors import user_errors_as_one_line  # noqa: E402
from segnet.export_run import export  # noqa: E402

log = logging.getLogger("export")


def load_standalone(package: Path) -> dict:
    """scripts/run_export.py's times for the package; RuntimeError with its output if it fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    ran = subprocess.run([sys.executable, str(Path(__file__).with_name("run_export.py")), str(package)],
                         capture_output=True, text=True, env=env)
    if ran.returncode != 0:
        raise RuntimeError(f"{package} does not run on its own:\n{ran.stderr[-3000:]}")
    return json.loads(ran.stdout.strip().splitlines()[-1])["seconds"]


@hydra.main(version_base="1.3", config_path="../conf", config_name="export")
def main(cfg: DictConfig) -> None:
    with user_errors_as_one_line():
        export(cfg)
    seconds = load_standalone(Path(cfg.output))
    log.info("runs without the training code: torch + ops import %.2f s, op library %.3f s, package %.2f s, "
             "first call %.3f s", seconds["import_torch_and_ops"], seconds["load_op_library"], seconds["load_package"],
             seconds["first_call"])


if __name__ == "__main__":
    main()
