"""Export a trained network for deployment, with torch.export and AOTInductor.

    python scripts/export.py ckpt_path=PATH [format=aoti|exported_program] [device=cpu|cuda] [output=model.pt2]

Writes the package and model.json (what prediction needs) beside it. Running it needs torch
and the segnet op library only (see segnet/exporting.py); scripts/predict.py model=PATH.pt2
predicts with it.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from segnet.errors import user_errors_as_one_line  # noqa: E402
from segnet.export_run import export  # noqa: E402


@hydra.main(version_base="1.3", config_path="../conf", config_name="export")
def main(cfg: DictConfig) -> None:
    with user_errors_as_one_line():
        export(cfg)


if __name__ == "__main__":
    main()
