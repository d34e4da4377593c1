"""An exported network (segnet-export's package) where prediction expects a trained module.

Prediction (segnet.inference.predictor.Predictor) needs hyperparameters, a device and whole-image logits;
this gives them from the package's model.json and the package itself, loaded with torch and
the op library alone. Images of any size are padded to the sizes the exported program accepts
(multiples of the stride, at least two), as the network itself pads.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lightning.pytorch.utilities.parsing import AttributeDict

import ops
from segnet.errors import ConfigError
from segnet.inference.windows import predict_whole_image
from segnet.model.network import on_stride_multiples


def metadata_path(package: Path) -> Path:
    """model.json beside model.pt2: what prediction needs besides the network."""
    return package.with_suffix(".json")


def load_package(package: Path, export_format: str, device: torch.device):
    """The callable network of an export, with the op library it calls loaded first."""
    ops.load_library(device.type)
    if export_format == "aoti":
        return torch._inductor.aoti_load_package(str(package))
    return torch.export.load(str(package)).module().to(device)


class ExportedModel:
    def __init__(self, package: Path, device: torch.device):
        meta_file = metadata_path(package)
        if not package.is_file() or not meta_file.is_file():
            raise ConfigError(
                f"model={package} needs the package and its {meta_file.name} beside it, as segnet-export "
                "writes them"
            )
        metadata = json.loads(meta_file.read_text())
        if metadata["device"] != device.type:
            raise ConfigError(
                f"{package} was compiled for {metadata['device']} but prediction runs on {device.type}: export it "
                f"again with device={device.type}, or predict with device={metadata['device']}"
            )
        self.device = device
        self.hparams = AttributeDict(data=metadata["data"], inference=metadata["inference"], precision="32-true")
        self.stride = int(metadata["input"]["multiple_of"])
        self.min_side = int(metadata["input"]["min_side"])
        self.net = load_package(package, metadata["format"], device)

    def eval(self) -> ExportedModel:
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return on_stride_multiples(self.net, x.float().contiguous(), self.stride, self.min_side)

    def predict_logits(self, image: torch.Tensor) -> torch.Tensor:
        return predict_whole_image(self, image, int(self.hparams.data["spatial_dims"]), self.hparams.inference)
