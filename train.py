"""Train a segmentation model: python train.py [overrides], e.g. op.backend=cuda compile=true.

Configuration lives in conf/ (Hydra); the run folder gets the resolved config, checkpoints,
TensorBoard logs and metrics.json.
"""

import hydra
from omegaconf import DictConfig

from segnet.config import register_resolvers
from segnet.errors import user_errors_as_one_line
from segnet.run import train

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    with user_errors_as_one_line():
        metrics = train(cfg)
    return metrics["val_dice_mean"]  # what a Hydra sweeper would optimize


if __name__ == "__main__":
    main()
