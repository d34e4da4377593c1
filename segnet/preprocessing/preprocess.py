"""Building the preprocessed cache: each case that is missing or stale is loaded by evaluation's
loading chain (segnet.data.transforms: orientation, crop, normalization, spacing of the plan), so
training on the cache sees exactly the arrays it saw when it loaded the sources, and written once
(segnet.preprocessing.cache). Cases are built in parallel threads (reading, decompressing and
resampling release the GIL) with a progress bar."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from segnet.data.dataset_json import Case, DatasetDescription, describe_dataset
from segnet.data.derived import cache_root, case_stamps
from segnet.data.transforms import case_dicts, eval_transforms, load_case
from segnet.errors import ConfigError
from segnet.files import exclusive, write_json
from segnet.planning.plan import plan_for_run, record_plan
from segnet.preprocessing.cache import PreprocessedCase, cache_folder, label_dtype, loading_plan
from segnet.progress import bar

log = logging.getLogger(__name__)


def grid_properties(image) -> dict[str, Any]:
    """Shape, spacing and affine of a loaded image (a MetaTensor), and the grid it was stored on."""
    affine = np.asarray(image.affine, dtype=np.float64)
    return {
        "channels": int(image.shape[0]), "shape": [int(s) for s in image.shape[1:]],
        "spacing": np.sqrt((affine[:3, :3] ** 2).sum(0)).round(6).tolist(), "affine": affine.tolist(),
        "original_affine": np.asarray(image.meta["original_affine"], dtype=np.float64).tolist(),
        "original_shape": [int(s) for s in image.meta["spatial_shape"]],
    }


def build_case(case: Case, entry: PreprocessedCase, geometry: dict[str, Any], dtype: np.dtype,
               ignore_label: int | None = None) -> None:
    with exclusive(entry.folder / f".{case.name}.lock"):
        if entry.is_current(case):  # another process built it while this one waited
            return
        sources = case_stamps(case)
        loaded = load_case(eval_transforms(True, **geometry), case_dicts([case])[0])
        image, label = loaded["image"], loaded["label"]
        entry.write(sources, image.numpy().astype(np.float32), label.numpy().astype(dtype), grid_properties(image),
                    ignore_label)


def preprocess(description: DatasetDescription, cases: Sequence[Case], geometry: dict[str, Any],
               cache_dir: str | None = None, workers: int = 2) -> dict[str, PreprocessedCase]:
    """The cache entry of each case under the loading plan `geometry` (orientation, spacing,
    normalization, crop), building those that are missing or stale."""
    plan = loading_plan(**geometry)
    folder = cache_folder(cache_root(cache_dir), description.root, plan)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "loading.json").is_file():
        write_json(folder / "loading.json", plan)
    entries = {case.name: PreprocessedCase(folder, case.name) for case in cases}
    stale = [case for case in cases if not entries[case.name].is_current(case)]
    if stale:
        dtype = label_dtype(description.largest_label_value)
        log.info("preprocessing %d of %d case(s) into %s", len(stale), len(cases), folder)
        with ThreadPoolExecutor(max(1, workers)) as pool:
            jobs = pool.map(lambda case: build_case(case, entries[case.name], geometry, dtype,
                                                    description.ignore_label), stale)
            for _ in bar(jobs, "preprocessing", "case", total=len(stale)):
                pass
    return entries


def preprocess_command(cfg: DictConfig) -> Path:
    """segnet-preprocess: the plan (data.plan, or planned now) applied, every labelled case cached."""
    if OmegaConf.is_missing(cfg.data, "root"):
        raise ConfigError("data.root is required: segnet-preprocess data.root=/data/Dataset001_Name")
    record_plan(plan_for_run(cfg, Path(cfg.paths.output_dir)), Path(cfg.paths.output_dir))
    description = describe_dataset(str(cfg.data.root))
    data = cfg.data
    geometry = {"orientation": data.orientation, "spacing": data.spacing, "normalization": data.normalization,
                "crop": data.crop}
    entries = preprocess(description, description.labelled, geometry, data.cache_dir, int(data.num_workers))
    folder = next(iter(entries.values())).folder
    log.info("%d case(s) preprocessed for the %dD plan in %s", len(entries), data.spatial_dims, folder)
    return folder
