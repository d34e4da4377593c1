"""Preprocessing: every case of a dataset loaded, reoriented, normalized and resampled by the plan
once, and written to a cache folder that training reads crops from by memory map
(segnet-preprocess, or training itself when the cache is missing)."""
