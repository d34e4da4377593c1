"""segnet: medical image segmentation training with a fused edge-enhancement operator."""

from segnet import library_output, monai_import

monai_import.install()
library_output.install()
