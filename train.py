"""Train a segmentation model: python train.py [overrides], e.g. op.backend=cuda compile=true.

The same as the installed command segnet-train (segnet/training/command.py). Configuration
lives in conf/ (Hydra); the run folder gets the resolved config, checkpoints, TensorBoard logs
and metrics.json.
"""

from segnet.training.command import main

if __name__ == "__main__":
    main()
