"""Natural images (PNG, BMP, JPEG, TIFF) as nnU-Net's NaturalImage2DIO and Tiff3DIO read them: read
through the loader as volumes of one slice, written back in their own format, checked with a
line that names the file and what to do, and trained and predicted end to end."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tifffile
from PIL import Image

from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.image_files import label_ending, read_label, read_stamp, write_label
from segnet.data.transforms import eval_transforms
from segnet.errors import ConfigError, DatasetError
from segnet.generated.fundus import write_fundus_dataset
from segnet.inference.predict import predict_command
from segnet.planning.record import dataset_fingerprint

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, (6, 9, 3), dtype=np.uint8)  # 6 rows, 9 columns


def loaded(path) -> np.ndarray:
    """An image as training loads it (channel first), without normalization or resampling."""
    plan = [{"channel": str(c), "scheme": "noNorm"} for c in range(3)]
    return np.asarray(eval_transforms(with_label=False, normalization=plan)({"image": str(path)})["image"])


@pytest.mark.parametrize("suffix", [".png", ".bmp", ".tif"])
def test_an_rgb_file_is_three_channels_of_one_slice_in_rows_and_columns(tmp_path, suffix):
    path = tmp_path / f"case_0000{suffix}"
    tifffile.imwrite(path, RGB, photometric="rgb") if suffix == ".tif" else Image.fromarray(RGB).save(path)
    image = loaded(path)
    assert image.shape == (3, 6, 9, 1)
    assert np.array_equal(image[..., 0], np.moveaxis(RGB, 2, 0))


def test_a_jpeg_reads_as_rgb_and_its_label_map_is_written_as_png(tmp_path):
    path = tmp_path / "photo_0000.jpg"
    Image.fromarray(RGB).save(path, quality=95)
    assert loaded(path).shape == (3, 6, 9, 1)
    assert label_ending(path) == ".png" and label_ending(tmp_path / "x.tif") == ".tif"
    assert label_ending(tmp_path / "x.nii.gz") == ".nii.gz"


def test_a_tiff_stack_is_slices_last_with_the_sidecars_spacing(tmp_path):
    stack = RNG.integers(0, 4000, (5, 6, 9), dtype=np.uint16)  # slices, rows, columns
    tifffile.imwrite(tmp_path / "cells.tif", stack)
    (tmp_path / "cells.json").write_text(json.dumps({"spacing": [2.0, 0.5, 0.25]}))
    array, spacing = read_label(tmp_path / "cells.tif")
    assert array.shape == (6, 9, 5) and np.array_equal(array, np.moveaxis(stack, 0, 2))
    assert spacing == [0.5, 0.25, 2.0]  # rows, columns, slices
    (tmp_path / "cells.json").write_text(json.dumps({"spacing": [2.0, 0.5]}))
    with pytest.raises(ValueError, match=r"cells.json: spacing \[2.0, 0.5\]; 3 positive numbers"):
        read_label(tmp_path / "cells.tif")


@pytest.mark.parametrize("suffix", [".png", ".tif", ".bmp"])
def test_a_label_map_is_written_in_the_images_format_and_size_with_its_stamp(tmp_path, suffix):
    label = RNG.integers(0, 3, (6, 9, 1))
    target = tmp_path / f"pred{suffix}"
    write_label(label, tmp_path / f"image{suffix}", target, stamp="segnet-predict model abc")
    assert np.array_equal(read_label(target)[0], label)
    with Image.open(target) as written:
        assert written.size == (9, 6) and written.mode == "L"
    assert read_stamp(target) == (None if suffix == ".bmp" else "segnet-predict model abc")  # BMP has no field


def break_case(root, name: str, what: str) -> str:
    """Breaks case `name` of a fundus folder as `what` says; the file broken."""
    image, label = root / "imagesTr" / f"{name}_0000.png", root / "labelsTr" / f"{name}.png"
    values = np.asarray(Image.open(label))
    if what == "size":
        Image.fromarray(values[:-4]).save(label)
    elif what == "rgba":
        Image.open(image).convert("RGBA").save(image)
    elif what == "palette":
        Image.open(label).convert("P").save(label)
    elif what == "16-bit":
        Image.fromarray(values.astype(np.uint16)).save(label)
    elif what == "value":
        Image.fromarray(np.where(values == 1, 7, values).astype(np.uint8)).save(label)
    return str(label if what != "rgba" else image)


def test_the_integrity_check_names_each_broken_natural_image_and_what_to_do(tmp_path):
    root = write_fundus_dataset(tmp_path / "fundus", cases=6, size=24)
    broken = {what: break_case(root, f"fundus_{i:03d}", what)
              for i, what in enumerate(("size", "rgba", "palette", "16-bit", "value"))}
    with pytest.raises(DatasetError) as caught:
        dataset_fingerprint(describe_dataset(str(root)))
    lines = str(caught.value).splitlines()
    assert lines[0].endswith("has 5 problem(s); training does not start on a broken dataset:")
    expected = {
        "size": r"20 x 24 pixels \(rows x columns\) but .*fundus_000_0000.png has 24 x 24: a case's files must",
        "rgba": "PIL mode RGBA, an image with an alpha channel: save it without it",
        "palette": "PIL mode P, a palette image .* labels as 8-bit grey images holding the class values",
        "16-bit": r"a 16-bit label \(PIL mode I;16\); labels are 8-bit grey images .*: save it as 8-bit",
        "value": r"label values 7 are not classes of dataset.json \(0 background, 1 vessel\)",
    }
    for what, pattern in expected.items():
        assert any(broken[what] in line and re.search(pattern, line) for line in lines), what


def test_an_rgb_dataset_trains_and_predicts_png_label_maps_of_each_images_size(tmp_path):
    from segnet.training.train import train

    root = write_fundus_dataset(tmp_path / "fundus", cases=4, size=32)
    description = describe_dataset(str(root))
    assert description.channel_names == ("R", "G", "B") and description.training[0].images[0].endswith("_0000.png")
    run = tmp_path / "run"
    train(compose_config(["data=folder", f"data.root={root}", "data.spatial_dims=2", "data.num_folds=2",
                          "data.num_workers=0", "op=python", "data.steps_per_epoch=2", *TINY_MODEL, *TINY_TRAINER],
                         output_dir=run))
    metrics = json.loads((run / "metrics.json").read_text())
    assert list(metrics["val_dice_per_class"]) == ["vessel"] and 0 <= metrics["val_dice_mean"] <= 1
    plan = json.loads((run / "plans.json").read_text())
    assert list(plan["configurations"]) == ["2d"] and plan["slicing_axis"] == "S"
    with pytest.raises(ConfigError, match=r"is a 2D dataset: its cases are one slice thick .* data.spatial_dims=2"):
        train(compose_config(["data=folder", f"data.root={root}", "data.num_folds=2", "op=python", *TINY_MODEL,
                              *TINY_TRAINER], output_dir=tmp_path / "in3d"))
    images = tmp_path / "photos"
    images.mkdir()
    for case in description.training[:2]:  # a folder of photographs, one with another size
        Image.open(case.images[0]).save(images / f"{case.name}_0000.png")
    Image.open(description.training[2].images[0]).resize((40, 28)).save(images / "wide_0000.png")
    out = tmp_path / "out"
    predict_command(compose_config([f"ckpt_path={run}/checkpoints/final.ckpt", f"input={images}", f"output={out}",
                                    "op=python"], name="predict"))
    sizes = {}
    for path in sorted(out.glob("*.png")):
        with Image.open(path) as written:
            sizes[path.name] = written.size
            assert written.mode == "L" and set(np.unique(np.asarray(written))) <= {0, 1}
    assert sizes == {"fundus_000.png": (32, 32), "fundus_001.png": (32, 32), "wide.png": (40, 28)}
