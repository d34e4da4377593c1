"""An ONNX file of segnet-export (format=onnx) as the network prediction calls: tensors in, logits
out, run by ONNX Runtime on the CPU, or with its CUDA provider where prediction runs on a GPU and
the installed ONNX Runtime has one."""

from __future__ import annotations

from pathlib import Path

import torch

from segnet.errors import ConfigError


def providers_for(device: torch.device, available: list[str]) -> list[str]:
    """ONNX Runtime's execution providers for `device`, best first: CUDA's on a GPU where the
    installed ONNX Runtime has it, the CPU's always (it runs what the others leave)."""
    wanted = ["CUDAExecutionProvider"] if device.type == "cuda" else []
    return [p for p in wanted if p in available] + ["CPUExecutionProvider"]


class OnnxNetwork:
    """(N, C, *spatial) float32 -> logits (N, classes, *spatial) on the input's device."""

    def __init__(self, path: Path, device: torch.device):
        try:
            import onnxruntime
        except ImportError:
            raise ConfigError(f"model={path} is an ONNX file, which needs ONNX Runtime: pip install "
                              "'segnet[onnx]'") from None
        providers = providers_for(device, onnxruntime.get_available_providers())
        self.runtime = onnxruntime.InferenceSession(str(path), providers=providers)
        self.input = self.runtime.get_inputs()[0].name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        (logits,) = self.runtime.run(None, {self.input: x.detach().float().cpu().numpy()})
        return torch.from_numpy(logits).to(x.device)
