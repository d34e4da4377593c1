"""The network (EdgeUNet, built from a model config), its loss, and the ablation's fixed
sharpening baseline."""
