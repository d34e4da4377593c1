"""Predict label maps for new images with one checkpoint or an ensemble, like nnUNetv2_predict.

    python scripts/predict.py ckpt_path=PATH input=DIR_OR_FILE output=DIR [tta=false] [save_probabilities=true]
    python scripts/predict.py model=PATH.pt2 input=DIR_OR_FILE output=DIR      (scripts/export.py's package)

Writes <output>/<case>.nii.gz (uint8, in each image's own geometry) and, with
save_probabilities=true, <output>/<case>.npz (probabilities, class_names). conf/predict.yaml
lists the options.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from segnet.config import register_resolvers  # noqa: E402
from segnet.errors import user_errors_as_one_line  # noqa: E402
from segnet.predict_run import predict  # noqa: E402

register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="predict")
def main(cfg: DictConfig) -> None:
    with user_errors_as_one_line():
        predict(cfg)


if __name__ == "__main__":
    # model=PATH.pt2 names an exported package; Hydra would take `model` for the config group
    # conf/model/, so it reaches the configuration as `exported`.
    sys.argv = ["exported=" + a.removeprefix("model=") if a.startswith("model=") else a for a in sys.argv]
    main()
