"""A trained network as an ONNX file of standard operators (format=onnx): it runs in ONNX Runtime,
TensorRT or OpenVINO with no segnet library.

The network is exported from its python-backend form, in which each edge layer is plain torch
(ops/reference.py: a replicate pad, a depthwise convolution with the fixed Sobel kernels, the
squares summed, a root, a multiply and an add), so the graph holds ONNX's own operators and no
custom domain. torch.onnx's dynamo exporter traces it with the dynamic batch and spatial sizes of
the other formats (segnet.export.exporter); model.json beside it says the same as theirs.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from segnet.errors import ConfigError
from segnet.export.exporter import example_and_dynamic_shapes, prediction_metadata
from segnet.files import atomic_path, write_json
from segnet.inference.export_files import metadata_path
from segnet.inference.trained_model import TrainedModel
from segnet.progress import step

ONNX = "onnx"
INPUT, OUTPUT = "image", "logits"  # the graph's input and output names, as the predictor feeds and reads them


# The exporter's graph passes log each node they fold or drop at INFO: hundreds of lines that say
# nothing a user can act on.
PASS_LOGGERS = ("onnxscript", "onnx_ir")


def onnx_modules():
    """onnx and onnxscript (torch.onnx's exporter needs it), or a ConfigError naming the extra."""
    try:
        import onnx
        import onnxscript  # noqa: F401  (torch.onnx's dynamo exporter imports it)
    except ImportError as error:
        raise ConfigError(f"format=onnx needs {error.name}: pip install 'segnet[onnx]'") from None
    return onnx


def custom_domains(graph) -> set[str]:
    """The operator domains other than ONNX's own (the default domain, "ai.onnx")."""
    return {node.domain for node in graph.node} - {"", "ai.onnx"}


def export_onnx(model: TrainedModel, output: Path) -> dict[str, Any]:
    """Writes the ONNX file of a python-backend network on the CPU and its model.json; returns the
    metadata with the times it took."""
    onnx = onnx_modules()
    if model.device.type != "cpu" or model.backend != "python":
        raise ValueError("export_onnx exports a network loaded on the CPU with the op's python backend "
                         f"(plain torch), got {model.device.type} and {model.backend}")
    for name in PASS_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    example, dynamic_shapes = example_and_dynamic_shapes(model)
    start = time.perf_counter()
    with step("torch.onnx export of the network", 1, 2), torch.no_grad():
        program = torch.onnx.export(model.net, (example,), dynamo=True, dynamic_shapes=dynamic_shapes,
                                    input_names=[INPUT], output_names=[OUTPUT], verbose=False)
    export_seconds = time.perf_counter() - start
    start = time.perf_counter()
    with step("checking and saving it", 2, 2), atomic_path(output) as temporary:
        program.save(str(temporary))
        onnx.checker.check_model(str(temporary), full_check=True)
        model_proto = onnx.load(str(temporary))
        graph = model_proto.graph
        domains = custom_domains(graph)
        if domains:
            raise RuntimeError(f"the ONNX graph of {output.name} calls operators outside ONNX's own: {sorted(domains)}")
    metadata = {
        # an ONNX file runs on any device ONNX Runtime has a provider for
        **prediction_metadata(model, ONNX, "any"),
        "opset": next(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx")),
        "operators": sorted({node.op_type for node in graph.node}),
        "seconds": {"export": export_seconds, "package": time.perf_counter() - start},
    }
    write_json(metadata_path(output), metadata)
    return metadata
