"""segnet: medical image segmentation training with a fused edge-enhancement operator."""

from segnet import monai_import

monai_import.install()
