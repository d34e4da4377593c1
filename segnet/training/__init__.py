"""Training: the LightningModule, its callbacks and the state a resume needs, the run folder and
metrics.json; what segnet-train (and train.py) runs."""
