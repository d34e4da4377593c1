"""nnU-Net's cascade: 3d_cascade_fullres trains at full resolution on the out-of-fold label maps
of its 3d_lowres runs (each case as predicted by the run that validated on it, never by one that
trained on it), and predicts new images after its first stage has predicted them."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.data import write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.config import RUN_CONFIG
from segnet.data.cascade_input import network_input, one_hot
from segnet.data.dataset_json import Case, describe_dataset
from segnet.data.image_files import read_stamp
from segnet.data.samples import PREVIOUS
from segnet.data.transforms import eval_transforms
from segnet.errors import ConfigError
from segnet.generated.tumour import write_tumour_dataset
from segnet.inference import previous_stage
from segnet.inference.prediction_writer import CaseLoader, images_digest
from segnet.inference.previous_stage import (
    OUT_OF_FOLD,
    PREDICTED_FIRST,
    check_trained_on,
    first_stage_maps,
    out_of_fold_runs,
    trained_dataset,
)
from segnet.planning.plan import input_channels


def write_run(folder, fold, val, train):
    folder.mkdir(parents=True)
    (folder / "splits.json").write_text(json.dumps({"fold": fold, "source": "test", "train": train, "val": val}))
    return folder


def test_each_case_is_read_from_the_run_that_validated_on_it(tmp_path):
    names = [f"case_{i:03d}" for i in range(4)]
    runs = [write_run(tmp_path / "r0", 0, names[:2], names[2:]), write_run(tmp_path / "r1", 1, names[2:], names[:2])]
    assert out_of_fold_runs(runs, names) == {names[0]: runs[0], names[1]: runs[0], names[2]: runs[1], names[3]: runs[1]}
    with pytest.raises(ConfigError, match=r"no run validated on 2 case\(s\) \(case_002, case_003\)"):
        out_of_fold_runs(runs[:1], names)
    twice = write_run(tmp_path / "r2", 2, names[1:3], [names[0], names[3]])
    with pytest.raises(ConfigError, match=r"r0 and .*r2 both validated on case_001"):
        out_of_fold_runs([*runs, twice], names)
    # a data.fold=all run validated on the cases it trained on: none of its label maps is out of fold
    every = write_run(tmp_path / "all", "all", names, names)
    with pytest.raises(ConfigError, match=r"all trained on the cases it validated on \(fold all\)"):
        out_of_fold_runs([every], names)


def test_a_cascade_trains_only_on_the_dataset_its_first_stage_was_cross_validated_on(tmp_path):
    names = [f"case_{i:03d}" for i in range(2)]
    runs = [write_run(tmp_path / "r0", 0, names[:1], names[1:]), write_run(tmp_path / "r1", 1, names[1:], names[:1])]
    for run in runs:
        (run / RUN_CONFIG).write_text(f"data:\n  root: {tmp_path / 'Task'}\n")
    assert trained_dataset(runs) == (tmp_path / "Task").resolve()
    check_trained_on(runs, tmp_path / "Task")
    with pytest.raises(ConfigError, match=r"the 3d_lowres runs trained on .*Task, this cascade trains on .*Other: "
                                          r"their label maps of its cases are out of fold only for the dataset"):
        check_trained_on(runs, tmp_path / "Other")
    (runs[1] / RUN_CONFIG).write_text(f"data:\n  root: {tmp_path / 'Other'}\n")
    with pytest.raises(ConfigError, match=r"the runs trained on different datasets"):
        trained_dataset(runs)


def test_a_cascade_takes_a_channel_per_foreground_label_value_of_classes_or_regions(tmp_path):
    regions = write_tumour_dataset(tmp_path / "tumour", cases=2, size=16)  # BraTS's regions of values 1, 2, 3
    classes = write_decathlon(tmp_path / "Task", cases=2)  # background and two classes
    for root, channels in ((regions, 4 + 3), (classes, 1 + 2)):
        data = compose_config(["data=folder", f"data.root={root}", "data.previous_stage=[run]"]).data
        assert input_channels(data) == channels


def test_prediction_reads_the_first_stage_map_as_one_hot_channels_after_the_image(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=1)
    case = describe_dataset(str(root)).labelled[0]
    geometry = {"orientation": "RAS", "spacing": [1.5, 1.5, 1.5]}
    # the case's own label stands in for its first stage's label map
    loader = CaseLoader([eval_transforms(True, **geometry)], [True], {case.name: Path(case.label)}, [1, 2])
    (item,) = loader(Case(case.name, case.images, None))
    label = eval_transforms(True, **geometry)({"image": case.images[0], "label": case.label})["label"]
    assert item[PREVIOUS].tolist() == one_hot(label.numpy(), [1, 2]).tolist() and item[PREVIOUS][1].any()
    given = network_input(item, 0)
    assert given.shape[0] == 1 + 2 and torch.equal(given[1:], item[PREVIOUS].float())


@pytest.mark.slow
def test_the_cascade_trains_on_out_of_fold_first_stage_maps_and_predicts_after_its_first_stage(tmp_path, monkeypatch,
                                                                                               caplog):
    from segnet.inference.predict import predict_command
    from segnet.training.train import train

    root = write_decathlon(tmp_path / "Task", cases=3)
    common = ["data=folder", f"data.root={root}", "data.num_folds=2", "data.num_workers=0", "op=python",
              "data.memory_budget_gb=0.0001", "data.steps_per_epoch=1", f"data.cache_dir={tmp_path / 'cache'}",
              *TINY_MODEL, *TINY_TRAINER]
    lowres = [tmp_path / f"lowres{fold}" for fold in (0, 1)]
    for fold, run in enumerate(lowres):
        train(compose_config([*common, "data.configuration=3d_lowres", f"data.fold={fold}"], output_dir=run))
    with pytest.raises(ConfigError, match=r"reads 3d_lowres's out-of-fold label maps: give its runs, one per fold"):
        train(compose_config([*common, "data.configuration=3d_cascade_fullres"], output_dir=tmp_path / "no"))

    cascade = tmp_path / "cascade"
    train(compose_config([*common, "data.configuration=3d_cascade_fullres",
                          f"data.previous_stage=[{lowres[0]},{lowres[1]}]"], output_dir=cascade))
    plan = json.loads((cascade / "plans.json").read_text())["configurations"]
    assert plan["3d_cascade_fullres"]["previous_stage"] == "3d_lowres"
    assert plan["3d_cascade_fullres"]["spacing"] == plan["3d"]["spacing"]
    hparams = torch.load(cascade / "checkpoints" / "final.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["model"]["in_channels"] == 1 + 2  # the image and one channel per foreground class
    assert hparams["data"]["previous_stage"] == [str(run.resolve()) for run in lowres]

    # every case of the fold was read as the run that validated on it predicted it, and no other
    for run in lowres:
        split = json.loads((run / "splits.json").read_text())
        written = sorted(p.name.removesuffix(".nii.gz") for p in (run / OUT_OF_FOLD).glob("*.nii.gz"))
        assert written == sorted(split["val"]) and not set(written) & set(split["train"])
    cached = sorted((tmp_path / "cache").rglob("*.previous.json"))
    assert len(cached) == 3
    for stamp in cached:
        source = json.loads(stamp.read_text())["path"]
        case = stamp.name.removesuffix(".previous.json")
        owner = next(run for run in lowres if case in json.loads((run / "splits.json").read_text())["val"])
        assert source == str(owner / OUT_OF_FOLD / f"{case}.nii.gz")
        on_grid = np.load(stamp.with_name(f"{case}.previous.npy"))
        assert np.array_equal(np.unique(on_grid), np.unique(nib.load(source).get_fdata().astype(int)))

    image = root / "imagesTr" / "case_000_0000.nii.gz"
    if not image.is_file():
        image = root / "imagesTr" / "case_000.nii.gz"
    out = tmp_path / "out"
    predict_command(compose_config([f"ckpt_path={cascade}/checkpoints/final.ckpt", f"input={image}", f"output={out}",
                                    "op=python"], name="predict"))
    assert (out / PREDICTED_FIRST / "case_000.nii.gz").is_file()  # the first stage predicted it first
    written = nib.load(out / "case_000.nii.gz")
    assert written.shape == nib.load(image).shape and np.allclose(written.affine, nib.load(image).affine)

    # Another image under the same name into the same folder: its first stage is predicted again,
    # with the command's op backend, and the cascade reads that map, not the other image's.
    backends = []
    loading = previous_stage.load_for_inference
    monkeypatch.setattr(previous_stage, "load_for_inference",
                        lambda path, device, backend: backends.append(backend) or loading(path, device, backend))
    other = write_decathlon(tmp_path / "Other", cases=3, first_seed=10)
    other_image = next((other / "imagesTr").glob("case_000*"))
    for folder in (out, tmp_path / "fresh"):
        predict_command(compose_config([f"ckpt_path={cascade}/checkpoints/final.ckpt", f"input={other_image}",
                                        f"output={folder}", "op=python"], name="predict"))
    assert backends == ["python"] * 4  # two first-stage runs, two predictions
    new_case = Case("case_000", (str(other_image),), None)
    assert read_stamp(out / PREDICTED_FIRST / "case_000.nii.gz").endswith(f" image {images_digest(new_case)}")
    for name in (f"{PREDICTED_FIRST}/case_000.nii.gz", "case_000.nii.gz"):
        assert np.array_equal(nib.load(out / name).get_fdata(), nib.load(tmp_path / "fresh" / name).get_fdata())

    # Another labelled dataset whose cases are named like the first stage's validation cases: its
    # images are new to the first stage, predicted by the folds' ensemble, never read from (or
    # written over) the runs' out-of-fold label maps of the images they were validated on.
    kept = {path: path.stat().st_mtime_ns for run in lowres for path in (run / OUT_OF_FOLD).glob("*.nii.gz")}
    description = describe_dataset(str(other))
    with caplog.at_level("WARNING", "segnet.inference.previous_stage"):
        found = first_stage_maps([str(run) for run in lowres], list(description.labelled), tmp_path / "scored", "cpu",
                                 "python", 0, description)
    assert set(found.values()) == {tmp_path / "scored" / PREDICTED_FIRST / f"case_{i:03d}.nii.gz" for i in range(3)}
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
    assert f"the 3d_lowres runs trained on {root.resolve()}, not on {other}" in caplog.text

    # A DICOM series: the first stage's map is NIfTI (what the second stage reads), the answer a SEG.
    pytest.importorskip("highdicom")
    from helpers.dicom import write_series

    scan = nib.load(image)
    write_series(np.round(scan.get_fdata()), scan.affine, tmp_path / "dicom" / "ct", series_uid="1.2.826.0.1.9")
    predict_command(compose_config([f"ckpt_path={cascade}/checkpoints/final.ckpt", f"input={tmp_path / 'dicom'}",
                                    f"output={tmp_path / 'dicom_out'}", "op=python"], name="predict"))
    assert (tmp_path / "dicom_out" / PREDICTED_FIRST / "1.2.826.0.1.9.nii.gz").is_file()
    assert (tmp_path / "dicom_out" / "1.2.826.0.1.9.seg.dcm").is_file()
