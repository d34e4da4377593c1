"""Inference: loading a checkpoint or an exported package, whole-image inference (sliding window,
slices, flips), and prediction back on each image's own grid; segnet-predict."""
