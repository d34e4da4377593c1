"""Data: dataset folders (dataset.json, cases, splits), loading and augmentation transforms, the
data modules, datasets over the preprocessed cache, header checks and generated phantoms."""
