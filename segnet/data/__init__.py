"""Data: dataset folders (dataset.json, cases, splits), header checks, loading and augmentation
transforms, normalization, the crops' sampling, and the files derived from a dataset."""
