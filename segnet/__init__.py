"""segnet: medical image segmentation training with a fused edge-enhancement operator."""

from segnet import library_output, monai_import

monai_import.install()
library_output.install()


def load_model(path, **options):
    """A trained model to predict with in Python: segnet.inference.python_api.load_model (imported
    here, on first use, so that `import segnet` stays free of torch)."""
    from segnet.inference.python_api import load_model as load

    return load(path, **options)
