"""Checkpoint files, below both training and inference: reading them weights-only (reading), the
checkpoint files a command is given (paths), and writing them whole or not at all (writing)."""
