"""Planning: the dataset's integrity check and fingerprint, and the plan made from them (spacing,
orientation, normalization, patch and batch); segnet-plan."""
