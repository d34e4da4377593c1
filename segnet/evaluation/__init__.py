"""Evaluation: predictions scored per case and class, as nnU-Net reports them (summary.json), and
the statistics and sweep reading of ablations; segnet-evaluate."""
