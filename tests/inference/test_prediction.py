"""segnet-predict: new images (no labels, no dataset.json) to label maps in each image's own
geometry, with flips, ensembles and probabilities; the same code evaluation scores."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time

import nibabel as nib
import numpy as np
import pytest
import torch
from PIL import Image

from helpers.commands import installed_command, run_command
from helpers.training import compose_config
from segnet.data.image_files import read_stamp
from segnet.errors import ConfigError, DatasetError, user_errors_as_one_line
from segnet.generated.phantom import save_nifti
from segnet.inference.input_cases import find_cases
from segnet.inference.predict import predict_command
from segnet.inference.prediction_arguments import part_of
from segnet.inference.provenance import RECORD, claim, create_json, read_record


def test_cases_are_found_by_nnunet_channel_naming_or_one_file_each(tmp_path):
    image = np.zeros((4, 4, 4), np.float32)
    for name in ("b_0000", "b_0001", "a_0000", "a_0001"):
        save_nifti(tmp_path / "two" / f"{name}.nii.gz", image)
    cases = find_cases(tmp_path / "two", in_channels=2)
    assert [(c.name, [os.path.basename(p) for p in c.images]) for c in cases] == [
        ("a", ["a_0000.nii.gz", "a_0001.nii.gz"]), ("b", ["b_0000.nii.gz", "b_0001.nii.gz"])]
    assert [c.name for c in find_cases(tmp_path / "two" / "b_0000.nii.gz", 2)] == ["b"]  # one file: its case
    save_nifti(tmp_path / "plain" / "scan.nii.gz", image)
    assert [c.name for c in find_cases(tmp_path / "plain", 1)] == ["scan"]
    with pytest.raises(DatasetError, match=r"case scan .*: scan.nii.gz hold 1 channel\(s\) but the model takes 2: "
                                           r"name them scan_0000 .. scan_0001"):
        find_cases(tmp_path / "plain", 2)
    save_nifti(tmp_path / "gap" / "c_0000.nii.gz", image)
    save_nifti(tmp_path / "gap" / "c_0002.nii.gz", image)
    with pytest.raises(DatasetError, match=r"case c .* channel files numbered \[0, 2\], not 0 to 1"):
        find_cases(tmp_path / "gap", 2)
    with pytest.raises(ConfigError, match="does not exist"):
        find_cases(tmp_path / "nowhere", 1)


def test_a_one_channel_model_reads_numbered_frames_as_cases_of_their_own(tmp_path):
    for frame in range(3):
        Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / f"frame_{frame:04d}.png")
    assert [c.name for c in find_cases(tmp_path, 1)] == ["frame_0000", "frame_0001", "frame_0002"]
    (tmp_path / "frame_0001.png").unlink()
    (tmp_path / "frame_0002.png").unlink()
    assert [c.name for c in find_cases(tmp_path, 1)] == ["frame"]  # nnU-Net's naming: every file _0000


def test_two_files_of_one_case_and_channel_are_refused(tmp_path):
    save_nifti(tmp_path / "scan.nii.gz", np.zeros((4, 4, 4), np.float32))
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "scan.png")
    with pytest.raises(DatasetError, match=r"scan.nii.gz and .*scan.png are both case scan's channel 0: keep one"):
        find_cases(tmp_path, 1)


@pytest.mark.parametrize("num_parts", [1, 2, 3, 7])
def test_the_parts_cover_every_case_exactly_once(num_parts):
    cases = [f"case_{i:02d}" for i in range(11)]
    parts = [part_of(cases, num_parts, part) for part in range(num_parts)]
    assert sorted(case for part in parts for case in part) == cases
    assert max(map(len, parts)) - min(map(len, parts)) <= 1  # balanced


def test_a_part_outside_the_parts_is_refused():
    for num_parts, part_id in ((2, 2), (2, -1), (0, 0)):
        with pytest.raises(ConfigError, match=rf"num_parts={num_parts} part_id={part_id}: give num_parts >= 1"):
            part_of([], num_parts, part_id)


def run_script(command: str, args: list[str], out) -> subprocess.CompletedProcess:
    return run_command(command, *args, f"hydra.run.dir={out}/hydra")


def scaled_head_copy(checkpoint, path):
    """Another model: `checkpoint` with its output layer scaled (the same argmax, other probabilities)."""
    other = torch.load(checkpoint, weights_only=True, map_location="cpu")
    head = next(k for k in other["state_dict"] if k.startswith("net.head.") and k.endswith("weight"))
    other["state_dict"][head] = other["state_dict"][head] * 3.0
    torch.save(other, path)
    return path


@pytest.mark.slow
def test_predictions_of_new_images_come_back_in_their_geometry(trained_3d, tmp_path):
    root, run = trained_3d
    images = tmp_path / "new"
    images.mkdir()
    for i in range(2):  # images only, nnU-Net's channel naming, an oblique grid
        shutil.copy(root / "imagesTr" / f"case_{i:03d}.nii.gz", images / f"scan{i}_0000.nii.gz")
    # Two different models: the trained one and a copy with its output layer scaled.
    models = [run / "checkpoints" / "last.ckpt", scaled_head_copy(run / "checkpoints" / "last.ckpt",
                                                                   tmp_path / "other.ckpt")]
    for name, given in (("out", models), ("first", models[:1]), ("second", models[1:])):
        result = run_script("segnet-predict", [f"ckpt_path=[{','.join(map(str, given))}]", f"input={images}",
                                               f"output={tmp_path / name}", "save_probabilities=true", "op=cpp"],
                            tmp_path / f"h_{name}")
        assert result.returncode == 0, result.stderr[-3000:]
    for i in range(2):
        image = nib.load(images / f"scan{i}_0000.nii.gz")
        written = nib.load(tmp_path / "out" / f"scan{i}.nii.gz")
        assert written.shape == image.shape and np.allclose(written.affine, image.affine)
        assert written.get_data_dtype() == np.uint8
        saved = np.load(tmp_path / "out" / f"scan{i}.npz")
        probabilities = saved["probabilities"]
        assert list(saved["class_names"]) == ["background", "core", "shell"]
        assert probabilities.shape == (3, *image.shape)
        assert np.allclose(probabilities.sum(0), 1.0, atol=1e-4)
        assert np.array_equal(probabilities.argmax(0), np.asarray(written.dataobj))
        alone = [np.load(tmp_path / name / f"scan{i}.npz")["probabilities"] for name in ("first", "second")]
        assert not np.allclose(alone[0], alone[1], atol=1e-3)  # the two models differ ...
        assert np.allclose(probabilities, (alone[0] + alone[1]) / 2, atol=1e-5)  # ... and the ensemble is their mean


@pytest.mark.slow
def test_evaluation_scores_what_prediction_writes(trained_3d, tmp_path):
    root, run = trained_3d
    checkpoint = run / "checkpoints" / "last.ckpt"
    evaluated = run_script("segnet-evaluate", [f"ckpt_path={checkpoint}", f"data.root={root}", "data.split=all",
                                               "tta=true", "op=cpp"], tmp_path / "eval")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    predicted = run_script("segnet-predict", [f"ckpt_path={checkpoint}", f"input={root / 'imagesTr'}", "tta=true",
                                              f"output={tmp_path / 'pred'}", "op=cpp"], tmp_path / "pred")
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    for i in range(3):
        a = nib.load(tmp_path / "eval" / "hydra" / "predictions" / f"case_{i:03d}.nii.gz")
        b = nib.load(tmp_path / "pred" / f"case_{i:03d}.nii.gz")
        assert np.array_equal(np.asarray(a.dataobj), np.asarray(b.dataobj))


@pytest.mark.slow
def test_a_killed_prediction_continues_with_the_cases_it_did_not_finish(trained_3d, tmp_path):
    root, run = trained_3d
    images, out = tmp_path / "images", tmp_path / "out"
    images.mkdir()
    for i in range(3):
        for copy in range(3):  # nine cases: time for the kill to land mid-run
            shutil.copy(root / "imagesTr" / f"case_{i:03d}.nii.gz", images / f"scan{i}{copy}.nii.gz")
    args = [installed_command("segnet-predict"), f"ckpt_path={run}/checkpoints/best.ckpt", f"input={images}",
            f"output={out}", "op=cpp", "tta=false", f"hydra.run.dir={tmp_path}/h"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while process.poll() is None and len(list(out.glob("[!.]*.nii.gz"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in out.glob("[!.]*.nii.gz")}  # not a killed writer's temporary
    assert 2 <= len(finished) < 9, "the kill did not land mid-run"
    for name in finished:  # every label map there is whole
        assert np.asarray(nib.load(out / name).dataobj).shape == nib.load(images / name).shape
    again = subprocess.run(args + ["continue=true"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"continuing: {len(finished)} case(s) already in" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.nii.gz") if p.name in finished} == finished
    assert not list(out.glob(".*"))  # what the killed writer left is gone
    fresh = run_script("segnet-predict", [f"ckpt_path={run}/checkpoints/best.ckpt", f"input={images}",
                                          f"output={tmp_path / 'fresh'}", "op=cpp", "tta=false"], tmp_path)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    for image in sorted(images.iterdir()):
        a, b = (np.asarray(nib.load(folder / image.name).dataobj) for folder in (out, tmp_path / "fresh"))
        assert np.array_equal(a, b)


@pytest.mark.slow
def test_a_lying_scan_among_the_inputs_stops_prediction_before_anything_is_written(trained_3d, tmp_path):
    root, run = trained_3d
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(root / "imagesTr" / "case_000.nii.gz", images / "good.nii.gz")
    (images / "empty.nii.gz").write_bytes(b"")
    (images / "notes.json").write_text("{}")  # a sidecar: skipped, not an error
    result = run_script("segnet-predict", [f"ckpt_path={run}/checkpoints/best.ckpt", f"input={images}",
                                           f"output={tmp_path / 'out'}", "op=cpp"], tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-2] == ("error: 1 input scan(s) cannot be predicted, nothing was written (skip_broken=true leaves "
                         "their cases out and goes on with the others):")
    assert lines[-1] == f"{images / 'empty.nii.gz'}: an empty file"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow
def test_a_scan_corrupt_inside_its_stream_stops_prediction_before_anything_is_written_or_is_skipped(
        trained_3d, tmp_path, caplog):
    root, run = trained_3d
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(root / "imagesTr" / "case_000.nii.gz", images / "a_good.nii.gz")  # first: written first
    whole = bytearray((root / "imagesTr" / "case_001.nii.gz").read_bytes())
    middle = len(whole) // 2
    whole[middle:middle + 64] = bytes(64)  # its header and gzip trailer intact: only reading it through tells
    (images / "b_corrupt.nii.gz").write_bytes(whole)

    def predict_with(*overrides):
        return predict_command(compose_config([f"ckpt_path={run}/checkpoints/best.ckpt", f"input={images}", "op=cpp",
                                               f"output={tmp_path / 'out'}", "tta=false", *overrides],
                                              tmp_path / "hydra", name="predict"))

    with pytest.raises(DatasetError) as stopped:
        predict_with()
    lines = str(stopped.value).splitlines()
    assert lines[0] == ("1 input scan(s) cannot be predicted, nothing was written (skip_broken=true leaves their "
                        "cases out and goes on with the others):")
    assert lines[1].startswith(f"{images / 'b_corrupt.nii.gz'}: cannot be read (") and len(lines) == 2
    assert not (tmp_path / "out").exists()
    with caplog.at_level("WARNING", "segnet.data.input_check"):
        assert [p.case.name for p in predict_with("skip_broken=true")] == ["a_good"]
    assert "skip_broken=true: leaving out 1 case(s) whose scans cannot be predicted (b_corrupt)" in caplog.text
    assert sorted(p.name for p in (tmp_path / "out").glob("*.nii.gz")) == ["a_good.nii.gz"]


@pytest.mark.slow
def test_a_scan_cut_short_is_one_line_naming_it(trained_3d, tmp_path):
    root, run = trained_3d
    images = tmp_path / "images"
    images.mkdir()
    whole = (root / "imagesTr" / "case_000.nii.gz").read_bytes()
    (images / "cut.nii.gz").write_bytes(whole[: len(whole) // 3])  # its header intact, its stream ended early
    cfg = compose_config([f"ckpt_path={run}/checkpoints/best.ckpt", f"input={images}", f"output={tmp_path / 'out'}",
                          "op=cpp"], tmp_path / "hydra", name="predict")
    with pytest.raises(SystemExit) as stopped, user_errors_as_one_line():  # as segnet-predict runs it
        predict_command(cfg)
    assert stopped.value.code == (
        "error: 1 input scan(s) cannot be predicted, nothing was written (skip_broken=true leaves their cases out and "
        f"goes on with the others):\n{images / 'cut.nii.gz'}: cannot be read (EOFError: Compressed file ended before "
        "the end-of-stream marker was reached: the file ends early (truncated))")


@pytest.mark.slow
def test_continuing_never_mixes_two_models_label_maps(trained_3d, tmp_path, caplog):
    root, run = trained_3d
    images, out = tmp_path / "images", tmp_path / "out"
    images.mkdir()
    for i in range(2):
        shutil.copy(root / "imagesTr" / f"case_{i:03d}.nii.gz", images / f"scan{i}.nii.gz")
    first = run / "checkpoints" / "last.ckpt"
    second = scaled_head_copy(first, tmp_path / "second.ckpt")

    def predict_with(checkpoint, *overrides, tta="false", source=images):
        cfg = compose_config([f"ckpt_path={checkpoint}", f"input={source}", f"output={out}", "op=cpp", f"tta={tta}",
                              *overrides], tmp_path / "hydra", name="predict")
        return [prediction.case.name for prediction in predict_command(cfg)]

    def stamps():  # the model's id in each label map's stamp, which names its image's content too
        return {path.name: read_stamp(path).removeprefix("segnet-predict model ").split(" image ")[0]
                for path in sorted(out.glob("*.nii.gz"))}

    assert predict_with(first) == ["scan0", "scan1"]
    made = json.loads((out / RECORD).read_text())
    assert made["models"] == [{"path": str(first.resolve()), "sha256": hashlib.sha256(first.read_bytes()).hexdigest()}]
    assert (made["tta"], made["plan"]["class_names"]) == (False, ["background", "core", "shell"])
    assert made["postprocessing"] == {"rules": {"foreground_largest_component": False,
                                                "classes_largest_component": [], "regions_largest_component": []},
                                      "from": []}
    assert stamps() == {"scan0.nii.gz": made["id"], "scan1.nii.gz": made["id"]}
    before = {path.name: path.stat().st_mtime_ns for path in out.iterdir()}
    # Another checkpoint, or the same one with flips: refused, both models named, nothing written.
    for checkpoint, tta, differing in ((second, "false", "models"), (first, "true", "tta")):
        with pytest.raises(ConfigError) as refused:
            predict_with(checkpoint, "continue=true", tta=tta)
        message = str(refused.value)
        assert f"holds label maps of another model (its {RECORD}): {first.resolve()} (sha256 " in message
        assert f"this run's model: {checkpoint.resolve()} (sha256 " in message
        assert f"they differ in {differing}." in message and "give continue=false" in message
    assert {path.name: path.stat().st_mtime_ns for path in out.iterdir()} == before
    shutil.copy(first, tmp_path / "moved.ckpt")  # the same model from elsewhere: nothing left to do
    assert predict_with(tmp_path / "moved.ckpt", "continue=true") == []
    # continue=false with the second model, killed after its first case: the first model's label
    # maps are gone before the second model writes any (the record names the second model only);
    # the case it did not reach is predicted by continue=true, the case it did is kept.
    with caplog.at_level("WARNING", "segnet.inference.provenance"):
        assert predict_with(second, "continue=false", source=images / "scan0.nii.gz") == ["scan0"]
    assert "continue=false removed its 2 label map(s) there and predicts every case again with" in caplog.text
    replaced = read_record(out / RECORD)
    assert stamps() == {"scan0.nii.gz": replaced["id"]}
    assert predict_with(second, "continue=true") == ["scan1"]
    assert stamps() == {"scan0.nii.gz": replaced["id"], "scan1.nii.gz": replaced["id"]}
    # Probabilities asked for now: the cases written without them are not done.
    assert predict_with(second, "continue=true", "save_probabilities=true") == ["scan0", "scan1"]
    assert predict_with(second, "continue=true", "save_probabilities=true") == []
    # Another image under a predicted case's name is not done: a label map is its image's.
    shutil.copy(root / "imagesTr" / "case_002.nii.gz", images / "scan1.nii.gz")
    assert predict_with(second, "continue=true", "save_probabilities=true") == ["scan1"]
    # Label maps without a record (made by something else): refused on continue=true, with advice.
    (out / RECORD).unlink()
    with pytest.raises(ConfigError, match=r"holds 2 label map\(s\) of this run's cases \(e.g. scan0.nii.gz\) but no "
                                          rf"{RECORD}: nothing recorded the model that made them.*Give continue=false"):
        predict_with(second, "continue=true")
    assert predict_with(second) == ["scan0", "scan1"] and read_record(out / RECORD) == replaced


def test_processes_predicting_into_one_folder_agree_on_its_model(tmp_path):
    first, second = ({"id": name, "models": [{"path": f"/runs/{name}.ckpt", "sha256": name * 64}], "plan": {},
                      "tta": False, "postprocessing": {"rules": {}, "from": []}} for name in "ab")
    assert create_json(tmp_path / RECORD, first)
    assert not create_json(tmp_path / RECORD, second)  # a second process that also found no record
    assert read_record(tmp_path / RECORD) == first
    claim(tmp_path, first, continuing=True, label_maps=[])  # the same model goes on
    with pytest.raises(ConfigError, match=r"/runs/a.ckpt \(sha256 aaaaaaaaaaaa\).*this run's model: /runs/b.ckpt"):
        claim(tmp_path, second, continuing=True, label_maps=[])
    assert read_record(tmp_path / RECORD) == first
    assert [path.name for path in tmp_path.iterdir()] == [RECORD]  # no temporary left


def with_plan(checkpoint, path, **data):
    """`checkpoint` as if trained under another plan: its data settings changed by `data`."""
    other = torch.load(checkpoint, weights_only=True, map_location="cpu")
    other["hyper_parameters"]["data"] = {**other["hyper_parameters"]["data"], **data}
    torch.save(other, path)
    return path


@pytest.mark.slow
def test_an_ensemble_across_plans_averages_each_configuration_on_the_image_grid(trained_3d, trained_2d, tmp_path):
    # nnU-Net's ensemble of configurations: each predicts in its own plan and the configurations'
    # probabilities are averaged on the image's grid, one weight each (two models of one plan
    # count as one configuration)
    root, run = trained_3d
    checkpoint = run / "checkpoints" / "last.ckpt"
    data = torch.load(checkpoint, weights_only=True, map_location="cpu")["hyper_parameters"]["data"]
    coarse = with_plan(checkpoint, tmp_path / "coarse.ckpt", spacing=[2 * s for s in data["spacing"]])
    flat = trained_2d.checkpoint  # a 2D model: slice by slice, in its own plan
    scaled = scaled_head_copy(checkpoint, tmp_path / "scaled.ckpt")
    image = root / "imagesTr" / "case_000.nii.gz"

    def probabilities(name, *models):
        predict_command(compose_config([f"ckpt_path=[{','.join(map(str, models))}]", f"input={image}", "tta=false",
                                        f"output={tmp_path / name}", "save_probabilities=true", "op=cpp"],
                                       name="predict"))
        return np.load(tmp_path / name / "case_000.npz")["probabilities"]

    alone = {name: probabilities(name, model) for name, model in
             (("fine", checkpoint), ("scaled", scaled), ("coarse", coarse), ("flat", flat))}
    assert not np.allclose(alone["fine"], alone["coarse"], atol=1e-3)
    assert not np.allclose(alone["fine"], alone["flat"], atol=1e-3)
    ensemble = probabilities("ensemble", checkpoint, scaled, coarse, flat)
    expected = ((alone["fine"] + alone["scaled"]) / 2 + alone["coarse"] + alone["flat"]) / 3
    assert ensemble.shape == (3, *nib.load(image).shape)
    assert np.allclose(ensemble, expected, atol=1e-5)
    record = json.loads((tmp_path / "ensemble" / RECORD).read_text())
    assert [c["spatial_dims"] for c in record["plan"]["configurations"]] == [3, 3, 2]


@pytest.mark.slow
def test_the_best_configuration_is_chosen_on_the_cross_validation_and_predicts_with_its_command(
        trained_3d, trained_2d, tmp_path):
    from segnet.postprocessing.find_best import find_best_command

    root, run = trained_3d
    result = find_best_command(compose_config(
        [f"data.root={root}", f"runs=[{run},{trained_2d.run}]", "checkpoint=last.ckpt", "tta=false", "op=cpp"],
        output_dir=tmp_path / "best", name="find_best"))
    assert list(result["means"]) == ["3d", "2d", "3d + 2d"]
    assert result["means"][result["best"]]["Dice"] == max(means["Dice"] for means in result["means"].values())
    assert {row["variant"] for row in result["compared_with_best"]["Dice"]} == set(result["means"]) - {result["best"]}
    scores = (tmp_path / "best" / "scores.csv").read_text().splitlines()
    validated = sorted(path.stem for path in (tmp_path / "best" / "3d" / "fold_0").glob("*.nii.gz"))
    assert len(scores) == 1 + 3 * len(validated) * 2 * 3  # candidates x cases x classes x metrics
    assert (tmp_path / "best" / "best_configuration.png").is_file()
    assert result["best"] in (tmp_path / "best" / "best_configuration.md").read_text()
    # the command it prints predicts with the chosen models and its postprocessing
    command = result["predict"].replace("INPUT_FOLDER", str(root / "imagesTr" / "case_000.nii.gz")).replace(
        "OUTPUT_FOLDER", str(tmp_path / "predicted"))
    ran = subprocess.run(command + f" hydra.run.dir={tmp_path}/h op=cpp", shell=True, capture_output=True, text=True,
                         env={**os.environ, "HYDRA_FULL_ERROR": "0"}, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    record = json.loads((tmp_path / "predicted" / RECORD).read_text())
    assert len(record["models"]) == len(result["configurations"])
    assert record["postprocessing"]["from"] == [str((tmp_path / "best" / "postprocessing.json").resolve())]
    # the fitted temperature is recorded, applied only by the command that asks for it
    assert set(record["temperature"]) == {1.0} and set(result["temperature"]) == {"3d", "2d"}
    choice = (tmp_path / "best" / "best_configuration.json").resolve()
    assert result["tempered"] == f"{result['predict']} temperature={choice}"


@pytest.mark.slow
def test_a_model_package_predicts_alone_what_its_runs_ensemble_predicts(trained_3d, trained_2d, tmp_path,
                                                                         monkeypatch):
    from segnet.export.export_model import export_model_command
    from segnet.inference.loading import load_for_inference
    from segnet.inference.package import read_manifest, unpacked

    monkeypatch.setenv("SEGNET_MODELS", str(tmp_path / "unpacked"))
    root, run = trained_3d
    runs = [tmp_path / "runs" / name for name in ("3d", "2d")]
    for source, copy in zip((run, trained_2d.run), runs, strict=True):  # run folders that go away afterwards
        shutil.copytree(source, copy)
        shutil.copy(copy / "checkpoints" / "last.ckpt", copy / "checkpoints" / "final.ckpt")
    (runs[0] / "postprocessing.json").write_text(json.dumps({"foreground_largest_component": True,
                                                             "classes_largest_component": []}))
    (runs[1] / "postprocessing.json").write_text((runs[0] / "postprocessing.json").read_text())
    package = tmp_path / "model.zip"
    manifest = export_model_command(compose_config([f"runs=[{runs[0]},{runs[1]}]", f"output={package}",
                                                    "exports=[exported_program]"], name="export_model"))
    assert [m["configuration"] for m in manifest["models"]] == ["3d", "2d"]
    # each network rides along exported, for torch and the op library alone, computing what it computes
    assert manifest["exports"] == {"formats": ["exported_program"], "device": "cpu"}
    folder = unpacked(package)
    for i, (run_folder, shape) in enumerate(zip(runs, [(1, 1, 16, 16, 16), (2, 1, 16, 16)], strict=True)):
        exported = torch.export.load(folder / f"models/{i}/exports/exported_program.pt2").module()
        eager = load_for_inference(run_folder / "checkpoints" / "final.ckpt", "cpu", "cpp").net
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(exported(x), eager(x))
        assert json.loads((folder / f"models/{i}/exports/exported_program.json").read_text())["format"] == \
            "exported_program"
    assert manifest["class_names"] == ["background", "core", "shell"]
    assert manifest["postprocessing"]["foreground_largest_component"] is True
    image = root / "imagesTr" / "case_000.nii.gz"

    def predicted(name, *model):
        predict_command(compose_config([*model, f"input={image}", f"output={tmp_path / name}",
                                        "save_probabilities=true", "tta=false", "op=cpp"], name="predict"))
        return (np.asarray(nib.load(tmp_path / name / "case_000.nii.gz").dataobj),
                np.load(tmp_path / name / "case_000.npz")["probabilities"])

    from_runs = predicted("runs", f"ckpt_path=[{runs[0]}/checkpoints/final.ckpt,{runs[1]}/checkpoints/final.ckpt]")
    shutil.rmtree(tmp_path / "runs")  # the package alone
    from_package = predicted("package", f"exported={package}")
    assert np.array_equal(from_package[0], from_runs[0]) and np.array_equal(from_package[1], from_runs[1])
    record = json.loads((tmp_path / "package" / RECORD).read_text())
    assert record["postprocessing"]["rules"]["foreground_largest_component"] is True  # the package's rules
    assert record["models"] == [{"path": str(package.resolve()), "sha256": hashlib.sha256(package.read_bytes())
                                 .hexdigest()}]
    # a damaged copy, and a package of another segnet, are refused in one line
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(package.read_bytes()[: package.stat().st_size // 2])
    with pytest.raises(ConfigError, match=r"is not a model package \(no zip archive\)"):
        read_manifest(damaged)
    monkeypatch.setattr("segnet.inference.package.segnet_version", lambda: "9.9.9")
    with pytest.raises(ConfigError, match=r"was written by segnet 0.1.0, this is segnet 9.9.9"):
        read_manifest(package)


@pytest.mark.slow
@pytest.mark.cuda
def test_on_a_gpu_the_probabilities_are_mapped_back_there_as_the_cpu_maps_them(trained_3d, tmp_path):
    from segnet.data.dataset_json import Case
    from segnet.inference.ensemble import Predictor
    from segnet.inference.loading import load_for_inference
    from segnet.inference.prediction_writer import PredictionWriter

    root, run = trained_3d
    case = Case("case_000", (str(root / "imagesTr" / "case_000.nii.gz"),), None)
    written = {}
    for device in ("cpu", "cuda"):
        writer = PredictionWriter(Predictor([load_for_inference(run / "checkpoints" / "last.ckpt", device, "python")],
                                            tta=True), tmp_path / device, save_probabilities=True)
        loaded = writer.load(case)
        inferred = writer.infer(loaded)
        assert inferred[0].device.type == device  # resampled where the network ran
        written[device] = writer.finish(case, loaded, inferred)
    on_gpu, on_cpu = (np.load(tmp_path / d / "case_000.npz")["probabilities"] for d in ("cuda", "cpu"))
    np.testing.assert_allclose(on_gpu, on_cpu, atol=1e-4)
    assert (written["cuda"].label_map != written["cpu"].label_map).mean() < 1e-3  # ties may fall either way


@pytest.mark.slow
def test_the_pipelined_predictor_writes_what_one_case_after_another_writes(trained_3d, trained_2d, tmp_path):
    root = trained_3d.root
    models = f"ckpt_path=[{trained_3d.checkpoint},{trained_2d.checkpoint}]"  # two plans
    for workers in (0, 2):
        predictions = predict_command(compose_config([models, f"input={root / 'imagesTr'}",
                                                      f"output={tmp_path / str(workers)}", f"num_workers={workers}",
                                                      "save_probabilities=true", "tta=false", "op=cpp"],
                                                     name="predict"))
        assert [p.case.name for p in predictions] == ["case_000", "case_001", "case_002"]  # in order
    for name in ("case_000", "case_001", "case_002"):
        one, two = (tmp_path / str(workers) / f"{name}.nii.gz" for workers in (0, 2))
        assert np.array_equal(np.asarray(nib.load(one).dataobj), np.asarray(nib.load(two).dataobj))
        assert np.array_equal(*(np.load(tmp_path / str(w) / f"{name}.npz")["probabilities"] for w in (0, 2)))
