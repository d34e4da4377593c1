"""A label map as a DICOM SEG (highdicom) for the DICOM series it was predicted from: one frame
per source slice (each referencing its instance, in the series' frame of reference), one binary
segment per class or region named by dataset.json, segmented by the algorithm "segnet" (its
version, and the model's stamp as its parameter), which viewers (OHIF, 3D Slicer, PACS) read."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from segnet.data.dicom_extra import extra_module
from segnet.data.dicom_series import source_datasets

STAMP_PARAMETER = "model"
logging.getLogger("highdicom").setLevel(logging.WARNING)  # its INFO: a line per DICOM module it copies


def segnet_version() -> str:
    try:
        return metadata.version("segnet")
    except metadata.PackageNotFoundError:  # a checkout on the path, not installed
        return "unknown"


def write_seg(label_map: np.ndarray, series: str, target: str | Path, stamp: str,
              segments: Sequence[tuple[str, Sequence[int]]]) -> None:
    """`label_map` (x, y, z on the series' grid, slices in its order) as a DICOM SEG at `target`;
    `segments`: each segment's name and the label values it covers."""
    hd = extra_module("highdicom")
    from pydicom.sr.codedict import codes

    sources = source_datasets(series)
    frames = np.moveaxis(label_map, [0, 1], [2, 1])  # (slices, rows, columns)
    masks = np.stack([np.isin(frames, values) for _, values in segments], axis=-1).astype(np.uint8)
    algorithm = hd.AlgorithmIdentificationSequence(name="segnet", version=segnet_version(),
                                                   family=codes.cid7162.ArtificialIntelligence,
                                                   parameters={STAMP_PARAMETER: stamp})
    descriptions = [hd.seg.SegmentDescription(
        segment_number=number, segment_label=name, segmented_property_category=codes.SCT.Tissue,
        segmented_property_type=codes.SCT.Tissue, algorithm_type=hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC,
        algorithm_identification=algorithm) for number, (name, _) in enumerate(segments, start=1)]
    seg = hd.seg.Segmentation(
        source_images=sources, pixel_array=masks, segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=descriptions, series_instance_uid=hd.UID(), series_number=99, sop_instance_uid=hd.UID(),
        instance_number=1, manufacturer="segnet", manufacturer_model_name="segnet", software_versions=segnet_version(),
        device_serial_number="none", series_description="segnet segmentation", omit_empty_frames=False)
    seg.ImageComments = stamp  # read back by read_stamp: whose label map this is
    seg.save_as(str(target))


def read_seg_stamp(path: str | Path) -> str | None:
    header = extra_module("pydicom").dcmread(path, stop_before_pixels=True, specific_tags=["ImageComments"])
    return str(header.ImageComments) if "ImageComments" in header else None
