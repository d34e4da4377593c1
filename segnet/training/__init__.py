"""Training: the LightningModule, its callbacks and checkpoints, the run folder and metrics.json;
segnet-train (and train.py)."""
