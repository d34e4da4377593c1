"""segnet-train [overrides] (the same as python train.py), e.g. op.backend=cuda compile=true.

Configuration lives in conf/ (Hydra); the run folder gets the resolved config, checkpoints,
TensorBoard logs and metrics.json. The value returned is what a Hydra sweeper optimizes.
"""

from segnet.commands import hydra_command
from segnet.training.api import train

main = hydra_command("train", lambda cfg: train(cfg)["val_dice_mean"])

if __name__ == "__main__":
    main()
