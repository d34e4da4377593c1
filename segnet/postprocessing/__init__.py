"""segnet-postprocess: the postprocessing rules decided on the cross-validation's predictions."""
