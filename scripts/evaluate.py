"""Evaluate a checkpoint on a Decathlon / nnU-Net dataset folder, nnU-Net style.

    python scripts/evaluate.py ckpt_path=PATH data.root=DIR data.split=validation [tta=true]

Writes summary.json (metric_per_case, mean, foreground_mean), per_case.csv and
predictions/<case>.nii.gz (in each image's own geometry) into the run folder.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from segnet.config import register_resolvers  # noqa: E402
from segnet.errors import user_errors_as_one_line  # noqa: E402
from segnet.evaluate_run import evaluate  # noqa: E402

register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    with user_errors_as_one_line():
        evaluate(cfg)


if __name__ == "__main__":
    main()
