"""segnet: medical image segmentation training with a fused edge-enhancement operator."""
