"""segnet-train [overrides] (the same as python train.py), e.g. op.backend=cuda compile=true.

Configuration lives in conf/ (Hydra); the run folder gets the resolved config, checkpoints,
TensorBoard logs and metrics.json. The value returned is what a Hydra sweeper optimizes.
"""

from omegaconf import DictConfig

from segnet.commands import hydra_command


def objective(cfg: DictConfig) -> float:
    """The run's final validation mean Dice, what a sweeper optimizes."""
    from segnet.training.api import train  # imported once the configuration composed (segnet.commands)

    return train(cfg)["val_dice_mean"]


main = hydra_command("train", "segnet.training.command:objective")

if __name__ == "__main__":
    main()
