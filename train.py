"""Train a segmentation model: python train.py [overrides], e.g. op.backend=cuda compile=true.

The same as the installed command segnet-train (segnet/commands.py). Configuration
lives in conf/ (Hydra); the run folder gets the resolved config, checkpoints, TensorBoard logs
and metrics.json.
"""

from segnet.commands import segnet_train

if __name__ == "__main__":
    segnet_train()
