"""A run fine-tuned from an nnU-Net model (model.init_from, segnet.training.fine_tuning): trained
on the source's grid and intensity scale, with nnU-Net's network.

As nnU-Net moves plans between datasets (nnUNetv2_move_plans_between_datasets), the run loads its
images as the source's configuration did (the stored axes in its order, its spacing, the crop to
the non-zero box, its normalization with its CT statistics where both normalize alike) and trains
the source's patch and batch (data.patch_size and data.batch_size given win; a patch must be a
multiple of the network's stride). Its model section becomes the source's architecture
(segnet.nnunet.run_model), trained as nnU-Net trains it: deeply supervised, with edge layers at
alpha 0 where model.edge_placement names places."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

from segnet.errors import ConfigError
from segnet.nnunet.architecture import total_stride
from segnet.nnunet.run_model import nnunet_model_section
from segnet.nnunet.source import NnunetSource
from segnet.planning.planner import volumes_per_step

log = logging.getLogger(__name__)
GRID = ("orientation", "spacing", "crop")  # how the source's configuration loads its images


def carry_nnunet_source(cfg: DictConfig, given: DictConfig, plan: dict[str, Any] | None, source: NnunetSource,
                        same_scale: bool) -> dict[str, Any] | None:
    """This run's data section set to load as `source` did and its model section set to the
    source's network; `given` is the data section as composed (what the user set). The plan to
    record: this dataset's, saying what was carried and from where."""
    data, path = cfg.data, str(cfg.model.init_from)
    dims = source.data["spatial_dims"]
    if dims != 3 or int(data.spatial_dims) != 3:
        raise ConfigError(f"model.init_from={path} is nnU-Net's {source.folder.configuration} configuration; segnet "
                          "fine-tunes nnU-Net's 3D configurations (3d_fullres, 3d_lowres) with data.spatial_dims=3")
    config = source.configuration()
    for key in GRID:
        data[key] = source.data[key]
    if same_scale:  # the source's statistics (CT's) under this dataset's channel names
        data.normalization = [{**entry, "channel": own["channel"]} for entry, own in
                              zip(source.data["normalization"], OmegaConf.to_container(data.normalization),
                                  strict=True)]
    if given.patch_size is None:
        data.patch_size = source.data["patch_size"]
    if given.batch_size is None:
        data.batch_size = volumes_per_step(int(config["batch_size"]), int(data.samples_per_volume))
    stride = total_stride(config["architecture"])[::-1]  # in segnet's axis order
    if any(int(p) % k for p, k in zip(data.patch_size, stride, strict=True)):
        raise ConfigError(f"data.patch_size={list(data.patch_size)} is not a multiple of the stride {stride} of "
                          f"model.init_from={path}'s network on each axis; give one that is, or leave it to the "
                          f"source's {source.data['patch_size']}")
    cfg.model = nnunet_model_section(source.folder, OmegaConf.to_container(data, resolve=True),
                                     deep_supervision=True, edge_placement=list(cfg.model.edge_placement),
                                     init_from=path)
    log.info("model.init_from=%s: nnU-Net's %s network, loading as it did (axes %s, spacing %s, %s normalization), "
             "patch %s, edge layers at %s", path, source.folder.configuration, list(data.orientation),
             list(data.spacing), "its" if same_scale else "this dataset's", list(data.patch_size),
             list(cfg.model.edge_placement) or "none")
    if plan is None:
        return None
    carried = {**plan, "carried_from": path, "crop": source.data["crop"],
               "normalization": OmegaConf.to_container(data.normalization)}
    data.plan = {key: value for key, value in carried.items() if key != "fingerprint"}
    return carried
