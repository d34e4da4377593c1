"""A trained network out of the training code: torch.export, and an AOTInductor package.

The network is exported in float32 for one device, with a dynamic batch and spatial sizes that
are multiples of its total stride, at least two of them (what its decoder needs; prediction pads
to them). The edge op
stays one graph node, `segnet_ops.edge_enhance`, which its fake kernel makes possible, so
running the export needs torch and the segnet op library (the `ops` package and its compiled
library), nothing from segnet/, Hydra, Lightning or MONAI:

    import ops, torch
    ops.load_compiled("cpu")                              # or "cuda"
    net = torch._inductor.aoti_load_package("model.pt2")  # format=aoti
    net = torch.export.load("model.pt2").module()         # format=exported_program

Next to the package, model.json carries what prediction needs: the plan (orientation, crop, spacing,
normalization), class names, spatial mode, input channels, the stride, and the inference
settings.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from segnet.files import atomic_path, write_json
from segnet.inference.export_files import metadata_path
from segnet.inference.trained_model import TrainedModel
from segnet.progress import step

FORMATS = ("aoti", "exported_program")
MAX_BATCH = 256
MAX_SIDE = 4096  # voxels per spatial axis the exported program accepts


def example_and_dynamic_shapes(model: TrainedModel) -> tuple[torch.Tensor, dict[str, dict]]:
    """An input the export traces with, and the sizes the exported network accepts: a dynamic
    batch, and spatial sizes that are multiples of the stride, at least two of them."""
    stride = list(model.net.downsampling)  # per axis
    example = torch.zeros(2, model.settings.in_channels, *[2 * s for s in stride], device=model.device)
    dynamic = {0: torch.export.Dim("batch", min=1, max=MAX_BATCH)}
    # At least two strides per axis: one would leave the deepest level a single voxel, a size
    # the exported program specializes on.
    dynamic.update({2 + axis: s * torch.export.Dim(f"blocks_{axis}", min=2, max=MAX_SIDE // s)
                    for axis, s in enumerate(stride)})
    return example, {"x": dynamic}


def prediction_metadata(model: TrainedModel, export_format: str, device: str) -> dict[str, Any]:
    """What a predictor needs besides the network (model.json): the plan and classes in the data
    section, the inputs the network accepts, the whole-image settings."""
    stride = list(model.net.downsampling)
    return {
        "format": export_format,
        "device": device,
        "torch": torch.__version__,
        "input": {"channels": model.settings.in_channels, "spatial_dims": model.settings.spatial_dims,
                  "multiple_of": stride, "min_side": [2 * s for s in stride], "max_side": MAX_SIDE,
                  "max_batch": MAX_BATCH, "dtype": "float32"},
        "data": dict(model.data),
        "inference": dict(model.inference),
    }


def export_network(model: TrainedModel, output: Path, export_format: str) -> dict[str, Any]:
    """Writes the package of a checkpoint's network (on its device) and its model.json; returns the
    metadata with the times it took."""
    example, dynamic_shapes = example_and_dynamic_shapes(model)
    start = time.perf_counter()
    with step("torch.export of the network", 1, 2), torch.no_grad():
        program = torch.export.export(model.net, (example,), dynamic_shapes=dynamic_shapes)
    export_seconds = time.perf_counter() - start
    start = time.perf_counter()
    packaging = "AOTInductor compile and package (a minute or more)" if export_format == "aoti" else "saving it"
    with step(packaging, 2, 2), atomic_path(output) as temporary:
        if export_format == "aoti":
            torch._inductor.aoti_compile_and_package(program, package_path=str(temporary))
        else:
            torch.export.save(program, str(temporary))
    metadata = {
        **prediction_metadata(model, export_format, model.device.type),
        "edge_op_nodes": sum(1 for n in program.graph.nodes if n.target == torch.ops.segnet_ops.edge_enhance.default),
        "seconds": {"export": export_seconds, "package": time.perf_counter() - start},
    }
    write_json(metadata_path(output), metadata)
    return metadata
