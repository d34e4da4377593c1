"""An exported network (segnet-export's package, or its ONNX file) as a TrainedModel: its data and
whole-image settings from the package's model.json, the network from the package, loaded with
torch and the op library alone (an ONNX file: with ONNX Runtime). Images of any size are padded to
the sizes the exported program accepts (multiples of the stride, at least two), as the network
itself pads.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import ops
from segnet.errors import ConfigError
from segnet.inference.export_files import metadata_path
from segnet.inference.onnx_network import OnnxNetwork
from segnet.inference.trained_model import TrainedModel
from segnet.model.network import on_stride_multiples
from segnet.model.strides import Level


def load_package(package: Path, export_format: str, device: torch.device):
    """The callable network of an export, with the op library it calls loaded first."""
    ops.load_compiled(device.type)
    if export_format == "aoti":
        return torch._inductor.aoti_load_package(str(package))
    return torch.export.load(str(package)).module().to(device)


class OnStrideMultiples:
    """The exported program, called on images padded to the sizes it accepts."""

    def __init__(self, program, stride: Level, min_side: Level):
        self.program, self.stride, self.min_side = program, stride, min_side

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return on_stride_multiples(self.program, x.float().contiguous(), self.stride, self.min_side)


def load_exported(package: Path, device: torch.device) -> TrainedModel:
    meta_file = metadata_path(package)
    if not package.is_file() or not meta_file.is_file():
        raise ConfigError(
            f"model={package} needs the package and its {meta_file.name} beside it, as segnet-export writes them"
        )
    metadata = json.loads(meta_file.read_text())
    if metadata["format"] == "onnx":  # runs on any device, by ONNX Runtime
        network, backend = OnnxNetwork(package, device), "onnxruntime"
    elif metadata["device"] != device.type:
        raise ConfigError(
            f"{package} was compiled for {metadata['device']} but prediction runs on {device.type}: export it "
            f"again with device={device.type}, or predict with device={metadata['device']}"
        )
    else:
        network = load_package(package, metadata["format"], device)
        backend = "cuda" if device.type == "cuda" else "cpp"  # the fused op is what an export calls
    net = OnStrideMultiples(network, metadata["input"]["multiple_of"], metadata["input"]["min_side"])
    return TrainedModel(net, metadata["data"], metadata["inference"], device, "32-true", backend)
