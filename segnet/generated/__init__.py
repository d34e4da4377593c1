"""Generated data, made by segnet itself and nothing read from elsewhere: phantom scans at any
spacing and orientation (phantom), brain-like tissue (brain), thin structures at low contrast
(hard), written as dataset folders, and the images drawn on the fly for data=synthetic*
(synthetic)."""
