"""Reading a dataset folder's dataset.json: Medical Segmentation Decathlon or nnU-Net v2 raw.

Decathlon: "modality" and "labels" ({"0": "background", ...}), "training" as image/label pairs,
optional "validation" and "test" lists. nnU-Net v2: "channel_names", "labels"
({"background": 0, ...}), "file_ending"; cases are imagesTr/{case}_0000{ending} (one file per
channel, or one natural image holding them all: an RGB PNG is three) with labelsTr/{case}{ending}.
The formats are segnet.data.image_files'.
A label named "ignore" (nnU-Net's convention; the highest value) marks voxels whose class is
unknown: it is not a class the network predicts, and the loss and every metric leave it out.
nnU-Net v2's region-based labels (a label whose value is a list: "whole_tumor": [1, 2, 3], with
"regions_class_order") make the dataset's structures regions (segnet.data.regions); the class
names are then the background and the regions' names.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from segnet.data.formats import IMAGE_ENDINGS, NATURAL_ENDINGS, image_ending
from segnet.data.regions import Regions
from segnet.errors import DatasetError


@dataclass(frozen=True)
class Case:
    name: str
    images: tuple[str, ...]  # one file holding all channels, or one file per channel
    label: str | None

    @property
    def files(self) -> list[str]:
        """The case's images, then its label if it has one."""
        return [*self.images, *([self.label] if self.label else [])]


def case_seed(name: str) -> int:
    """A seed of the case's own, from its name: what is sampled of one case (its foreground voxels,
    its intensities) is the same whatever the other cases are."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


@dataclass(frozen=True)
class DatasetDescription:
    root: Path
    layout: str  # "decathlon" or "nnunet"
    channel_names: tuple[str, ...]
    class_names: tuple[str, ...]  # index = label value, background first; "ignore" not among them
    training: tuple[Case, ...]
    validation: tuple[Case, ...] | None
    test: tuple[Case, ...] = field(default=())
    ignore_label: int | None = None  # the label value of "ignore", the highest
    regions: Regions | None = None  # region-based labels: class_names[1:] name the regions

    @property
    def in_channels(self) -> int:
        return len(self.channel_names)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def label_values(self) -> tuple[int, ...]:
        """The values a label file may hold besides the ignore label."""
        if self.regions is None:
            return tuple(range(self.num_classes))
        return tuple(sorted({0, *(v for region in self.regions.values for v in region)}))

    @property
    def largest_label_value(self) -> int:
        return self.ignore_label if self.ignore_label is not None else max(self.label_values)

    @property
    def regions_settings(self) -> dict | None:
        """data.regions of a run on this dataset (segnet.data.regions)."""
        return self.regions.settings() if self.regions is not None else None

    @property
    def labelled(self) -> tuple[Case, ...]:
        """The cases with labels: training plus validation (what planning, checks and splits use)."""
        return (*self.training, *(self.validation or ()))


def _fail(path: Path, problem: str) -> DatasetError:
    return DatasetError(f"{path}: {problem}")


def _resolve(root: Path, entry: str, json_path: Path) -> str:
    path = (root / entry).resolve()
    if not path.exists():
        raise _fail(json_path, f"lists {entry!r}, which does not exist under {root}")
    return str(path)


def image_stem(file_name: str | Path) -> str | None:
    """The name of an image file without its ending, or None for a file that is not an image."""
    found = image_ending(file_name)
    return Path(file_name).name[: -len(found)] if found else None


def _case_name(file_name: str) -> str:
    return image_stem(file_name) or Path(file_name).stem


def _class_names_decathlon(labels: dict, json_path: Path) -> tuple[str, ...]:
    try:
        by_value = {int(value): str(name) for value, name in labels.items()}
    except ValueError as error:
        raise _fail(json_path, f'"labels" keys must be label values ("0", "1", ...): {error}') from None
    return _contiguous(by_value, json_path)


def _class_names_nnunet(labels: dict, json_path: Path) -> tuple[str, ...]:
    by_value: dict[int, str] = {}
    for name, value in labels.items():
        if not isinstance(value, int):
            raise _fail(json_path, f'label {name!r} has value {value!r}; label values are integers (or, for '
                                   'regions, lists of them with "regions_class_order")')
        by_value[value] = str(name)
    return _contiguous(by_value, json_path)


def is_region_based(labels: dict) -> bool:
    """nnU-Net's test: some label is a list of values."""
    return any(isinstance(value, (list, tuple)) for value in labels.values())


def _regions_nnunet(spec: dict, json_path: Path) -> tuple[tuple[str, ...], Regions, int | None]:
    """(background and the regions' names, the regions, the ignore label) of region-based labels."""
    names, values, ignore = [], [], None
    for name, value in spec["labels"].items():
        region = tuple(value) if isinstance(value, (list, tuple)) else (value,)
        if not region or not all(isinstance(v, int) and v >= 0 for v in region):
            raise _fail(json_path, f"label {name!r} has value {value!r}; a region is a list of label values >= 0")
        if name == "background":
            if region != (0,):
                raise _fail(json_path, f'"background" must be 0, not {value!r}')
        elif name == "ignore":
            (ignore,) = region
        else:
            names.append(str(name))
            values.append(region)
    order = spec.get("regions_class_order")
    if not (isinstance(order, list) and len(order) == len(values) and all(isinstance(v, int) and v > 0
                                                                          for v in order)):
        raise _fail(json_path, 'region-based labels need "regions_class_order": one label value > 0 per region '
                               f'({", ".join(names)}), the value each region is written as in a label map; '
                               f"got {order!r}")
    if ignore is not None and ignore <= max(max(region) for region in values):
        raise _fail(json_path, f'the "ignore" label ({ignore}) must have a higher value than every region\'s')
    return ("background", *names), Regions(tuple(values), tuple(order)), ignore


def nnunet_channels(spec: dict) -> tuple[str, ...]:
    """The channels' names of an nnU-Net v2 dataset.json, in channel order."""
    return tuple(str(spec["channel_names"][k]) for k in sorted(spec["channel_names"], key=int))


def nnunet_labels(spec: dict, json_path: Path) -> tuple[tuple[str, ...], Regions | None, int | None]:
    """(the class names, background first, the regions or None, the ignore label) of an nnU-Net v2
    dataset.json's "labels"."""
    if is_region_based(spec["labels"]):
        return _regions_nnunet(spec, json_path)
    class_names, ignore_label = _split_ignore(_class_names_nnunet(spec["labels"], json_path))
    return class_names, None, ignore_label


def _contiguous(by_value: dict[int, str], json_path: Path) -> tuple[str, ...]:
    if sorted(by_value) != list(range(len(by_value))) or len(by_value) < 2:
        raise _fail(json_path, f'"labels" must number classes 0..K-1 with K >= 2, got values {sorted(by_value)}')
    names = tuple(by_value[v] for v in range(len(by_value)))
    if "ignore" in names[:-1]:
        raise _fail(json_path, f'the "ignore" label must have the highest value ({len(names) - 1}), '
                               f'not {names.index("ignore")}')
    return names


def _split_ignore(names: tuple[str, ...]) -> tuple[tuple[str, ...], int | None]:
    """The classes, and the value of the "ignore" label if there is one."""
    if names[-1] != "ignore":
        return names, None
    if len(names) < 3:
        raise DatasetError(f'labels {list(names)}: an "ignore" label needs background and at least one class')
    return names[:-1], len(names) - 1


def _decathlon_cases(root: Path, entries: list, json_path: Path, key: str, labelled: bool) -> tuple[Case, ...]:
    cases = []
    for entry in entries:
        image = entry["image"] if isinstance(entry, dict) else entry
        if not isinstance(image, str) or (labelled and not isinstance(entry, dict)):
            raise _fail(json_path, f'"{key}" entries must be {{"image": ..., "label": ...}}, got {entry!r}')
        label = entry.get("label") if isinstance(entry, dict) else None
        image_path = _resolve(root, image, json_path)  # first: a missing image is named before its label
        cases.append(Case(_case_name(image), (image_path,), _resolve(root, label, json_path) if label else None))
    return tuple(cases)


def _nnunet_cases(root: Path, folder: str, ending: str, channels: int, labelled: bool) -> tuple[Case, ...]:
    image_dir = root / folder
    if not image_dir.is_dir():
        return ()
    cases = []
    for first in sorted(image_dir.glob(f"*_0000{ending}")):
        name = first.name[: -len(f"_0000{ending}")]
        images = tuple(str(image_dir / f"{name}_{c:04d}{ending}") for c in range(channels))
        missing = [p for p in images if not Path(p).exists()]
        if ending in NATURAL_ENDINGS and len(missing) == channels - 1:
            images, missing = images[:1], []  # one file holding every channel (its header is checked)
        if missing:
            files = ", ".join(Path(p).name for p in missing)
            raise DatasetError(f"{image_dir}: case {name} lacks channel file(s) {files}")
        label = root / folder.replace("images", "labels") / f"{name}{ending}"
        if labelled and not label.exists():
            raise DatasetError(f"{label} is missing: every case in {folder} needs its label map")
        cases.append(Case(name, images, str(label) if labelled else None))
    return tuple(cases)


@functools.lru_cache(maxsize=8)
def describe_dataset(root: str) -> DatasetDescription:
    """Parse and check root/dataset.json; DatasetError says exactly what is wrong. Paths are
    resolved once here, so a dataset reached through a link is the same dataset (and cache)."""
    folder = Path(root).expanduser().resolve()
    if not folder.is_dir():
        raise DatasetError(
            f"data.root={root} is not a folder; point it at a dataset with dataset.json, imagesTr, labelsTr"
        )
    json_path = folder / "dataset.json"
    if not json_path.is_file():
        raise DatasetError(f"{json_path} is missing: data.root must be a Decathlon or nnU-Net raw dataset folder")
    try:
        spec = json.loads(json_path.read_text())
    except json.JSONDecodeError as error:
        raise _fail(json_path, f"is not valid JSON ({error})") from None
    if not isinstance(spec, dict) or "labels" not in spec:
        raise _fail(json_path, 'has no "labels" entry (class names by label value)')
    if "channel_names" in spec:  # nnU-Net v2
        ending = spec.get("file_ending", ".nii.gz")
        if ending not in IMAGE_ENDINGS:
            raise _fail(json_path, f'"file_ending" {ending!r} is not a format segnet reads '
                                   f'({", ".join(IMAGE_ENDINGS)}): convert the images, e.g. to NIfTI with SimpleITK')
        channels = nnunet_channels(spec)
        class_names, regions, ignore_label = nnunet_labels(spec, json_path)
        training = _nnunet_cases(folder, "imagesTr", ending, len(channels), labelled=True)
        if not training:
            raise _fail(json_path, f"describes an nnU-Net dataset but imagesTr has no *_0000{ending} files")
        return DatasetDescription(
            folder, "nnunet", channels, class_names, training, None,
            _nnunet_cases(folder, "imagesTs", ending, len(channels), labelled=False), ignore_label, regions,
        )
    if "modality" not in spec or "training" not in spec:
        raise _fail(json_path, 'needs "modality" and "training" (Decathlon) or "channel_names" (nnU-Net v2)')
    channels = tuple(str(spec["modality"][k]) for k in sorted(spec["modality"], key=int))
    class_names, ignore_label = _split_ignore(_class_names_decathlon(spec["labels"], json_path))
    training = _decathlon_cases(folder, spec["training"], json_path, "training", labelled=True)
    if not training:
        raise _fail(json_path, '"training" lists no cases')
    validation = spec.get("validation")
    return DatasetDescription(
        folder, "decathlon", channels, class_names, training,
        _decathlon_cases(folder, validation, json_path, "validation", labelled=True) if validation else None,
        _decathlon_cases(folder, spec.get("test", []), json_path, "test", labelled=False), ignore_label,
    )
