"""A model package made from segnet-find-best-configuration's choice predicts what the choice
scored: its runs' checkpoints as they were scored, its tta and its postprocessing. The runs are
checkpoints written directly (tests/helpers/checkpoints.py), so a choice takes a second."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT
from helpers.checkpoints import MODEL_3D, run_data, write_checkpoint
from helpers.data import write_decathlon
from helpers.training import compose_config
from segnet.data.derived import file_digest
from segnet.errors import ConfigError
from segnet.export.export_model import export_model_command
from segnet.inference.package import unpacked
from segnet.inference.predict import predict_command
from segnet.inference.prediction_arguments import prediction_inputs
from segnet.inference.provenance import RECORD
from segnet.postprocessing.find_best import find_best_command


def scored_choice(folder: Path) -> tuple[Path, list[Path], Path]:
    """Two folds of one configuration and segnet-find-best-configuration's choice of them, scored
    without mirroring: (dataset, runs, best_configuration.json)."""
    root = write_decathlon(folder / "Task", cases=4)
    runs = [folder / f"fold{fold}" for fold in (0, 1)]
    for fold, run in enumerate(runs):
        write_checkpoint(run / "checkpoints" / "final.ckpt", MODEL_3D, {**run_data(), "fold": fold}, seed=fold)
    find_best_command(compose_config([f"data.root={root}", f"runs=[{runs[0]},{runs[1]}]", "tta=false",
                                        "op=python", "device=cpu"], output_dir=folder / "best", name="find_best"))
    return root, runs, folder / "best" / "best_configuration.json"


@pytest.fixture(scope="module")
def choice(tmp_path_factory):
    return scored_choice(tmp_path_factory.mktemp("choice"))


@pytest.fixture(autouse=True)
def models_home(tmp_path, monkeypatch):
    """Each test's packages unpacked in its own folder, not in the user's ~/.cache."""
    monkeypatch.setenv("SEGNET_MODELS", str(tmp_path / "unpacked"))


def package_of(choice_file: Path, package: Path) -> dict:
    return export_model_command(compose_config([f"choice={choice_file}", f"output={package}"], name="export_model"))


def predicted(output: Path, image: Path, *model: str) -> np.ndarray:
    """The probabilities segnet-predict writes for one image with `model`'s arguments."""
    predict_command(compose_config([*model, f"input={image}", f"output={output}", "save_probabilities=true",
                                    "op=python", "device=cpu", "num_workers=0"], name="predict"))
    return np.load(output / f"{image.name.removesuffix('.nii.gz')}.npz")["probabilities"]


def test_a_package_of_a_choice_predicts_with_the_tta_and_postprocessing_it_was_scored_with(choice, tmp_path):
    root, runs, best = choice
    package = tmp_path / "model.zip"
    made = package_of(best, package)
    fitted = json.loads(best.read_text())["temperature"]  # the configuration's, fitted on the folds' cases
    assert made["tta"] is False and made["temperature"] == fitted and set(fitted) == {"3d"}
    image = root / "imagesTr" / "case_000.nii.gz"
    checkpoints = f"ckpt_path=[{runs[0]}/checkpoints/final.ckpt,{runs[1]}/checkpoints/final.ckpt]"
    scored = predicted(tmp_path / "scored", image, checkpoints, "tta=false", f"temperature={best}")
    mirrored = predicted(tmp_path / "mirrored", image, checkpoints, f"temperature={best}")  # a checkpoint's: mirrored
    assert not np.allclose(scored, mirrored, atol=1e-3)
    # the temperature changes the probabilities, not the labels
    untempered = predicted(tmp_path / "untempered", image, checkpoints, "tta=false")
    assert not np.allclose(scored, untempered, atol=1e-3) and np.array_equal(scored.argmax(0), untempered.argmax(0))
    assert np.array_equal(predicted(tmp_path / "package", image, f"exported={package}", "temperature=fitted"), scored)
    record = json.loads((tmp_path / "package" / RECORD).read_text())
    assert record["temperature"] == [fitted["3d"]]
    assert np.array_equal(predicted(tmp_path / "plain", image, f"exported={package}"), untempered)  # by default
    assert record["tta"] is False and record["postprocessing"]["rules"] == json.loads(best.read_text())[
        "postprocessing"]
    # tta given overrides the package's
    assert np.array_equal(predicted(tmp_path / "asked", image, f"exported={package}", "tta=true",
                                    "temperature=fitted"), mirrored)


def test_packages_that_predict_one_mirrored_and_one_not_need_tta_given(choice, tmp_path):
    _, runs, best = choice
    scored, plain = tmp_path / "scored.zip", tmp_path / "plain.zip"
    package_of(best, scored)
    plain_manifest = export_model_command(compose_config([f"runs=[{runs[0]}]", f"output={plain}"], name="export_model"))
    assert plain_manifest["tta"] is True
    given = [f"exported=[{scored},{plain}]", f"input={tmp_path}", f"output={tmp_path / 'out'}"]
    with pytest.raises(ConfigError, match=r"some predict mirrored and some not \(their choices' tta\): give tta=true"):
        prediction_inputs(compose_config(given, name="predict"))
    assert prediction_inputs(compose_config([*given, "tta=false"], name="predict")).tta is False


def test_a_choice_whose_run_was_retrained_since_is_not_packaged(tmp_path):
    _, runs, best = scored_choice(tmp_path)
    checkpoint = runs[1] / "checkpoints" / "final.ckpt"
    write_checkpoint(checkpoint, MODEL_3D, {**run_data(), "fold": 1}, seed=7)  # trained again after the choice
    package = tmp_path / "model.zip"
    with pytest.raises(ConfigError, match=re.escape(f"{runs[1]}'s checkpoints/final.ckpt is not the one the choice "
                                                    "scored")):
        package_of(best, package)
    assert not package.exists()
    recorded = json.loads(best.read_text())
    recorded["checkpoint_sha256"][str(runs[1].resolve())] = file_digest(checkpoint)  # as if chosen on it
    best.write_text(json.dumps(recorded))
    assert [model["sha256"] for model in package_of(best, package)["models"]] == [
        file_digest(run / "checkpoints" / "final.ckpt") for run in runs]
    del recorded["checkpoint_sha256"]  # a choice that cannot tell
    best.write_text(json.dumps(recorded))
    with pytest.raises(ConfigError, match="does not record its runs' checkpoints"):
        package_of(best, tmp_path / "other.zip")


def test_a_package_whose_unpacked_checkpoint_changed_is_refused(choice, tmp_path):
    root, _, best = choice
    package = tmp_path / "model.zip"
    package_of(best, package)
    changed = unpacked(package) / "models" / "0" / "checkpoints" / "final.ckpt"
    write_checkpoint(changed, MODEL_3D, run_data(), seed=7)
    with pytest.raises(ConfigError, match=re.escape(f"{changed} is missing or not the file model.json names; it "
                                                    "changed since it was unpacked")):
        prediction_inputs(compose_config([f"exported={package}", f"input={root / 'imagesTr'}",
                                                   f"output={tmp_path / 'out'}"], name="predict"))


def test_a_package_of_other_segnet_source_predicts_with_a_warning_naming_the_files(choice, tmp_path, monkeypatch,
                                                                                   caplog):
    # the version (pyproject's) stays the same across changes; the source tells two segnets apart
    root, _, best = choice
    package = tmp_path / "model.zip"
    written_by = package_of(best, package)["segnet_source"]
    assert written_by["segnet/inference/windows.py"] == file_digest(ROOT / "segnet/inference/windows.py")[:16]
    this_one = {**written_by, "segnet/inference/windows.py": "another", "segnet/inference/new.py": "added"}
    monkeypatch.setattr("segnet.inference.package.source_digests", lambda: this_one)
    prediction_inputs(compose_config([f"exported={package}", f"input={root / 'imagesTr'}",
                                               f"output={tmp_path / 'out'}"], name="predict"))
    assert (f"model={package} was written by a segnet whose source differs from this one's in 2 file(s) "
            "(segnet/inference/new.py, segnet/inference/windows.py): its label maps may differ") in caplog.text
