"""segnet-predict's models, worked out once from its config: which files its record hashes and
where each model's postprocessing.json would be, for checkpoints and for exported programs (a
model package's: tests/export/test_model_package.py)."""

from __future__ import annotations

from helpers.training import compose_config
from segnet.inference.prediction_arguments import CHECKPOINTS, EXPORTED, prediction_inputs


def given(tmp_path, *overrides: str):
    return compose_config([f"input={tmp_path}", f"output={tmp_path / 'out'}", *overrides], name="predict")


def test_checkpoints_are_hashed_themselves_and_their_rules_are_in_their_run_folders(tmp_path):
    checkpoints = [tmp_path / f"fold_{k}" / "checkpoints" / "final.ckpt" for k in range(2)]
    loose = tmp_path / "elsewhere" / "weights.ckpt"  # outside a run's checkpoints/: its own folder
    for path in [*checkpoints, loose]:
        path.parent.mkdir(parents=True)
        path.touch()
    inputs = prediction_inputs(given(tmp_path, f"ckpt_path=[{checkpoints[0]},{checkpoints[1]},{loose}]"))
    assert inputs.kind == CHECKPOINTS and inputs.tta is True
    assert inputs.models == inputs.files == (*checkpoints, loose)
    assert inputs.folders == ((tmp_path / "fold_0").resolve(), (tmp_path / "fold_1").resolve(), loose.parent.resolve())


def test_an_export_is_hashed_with_its_model_json_and_its_rules_are_beside_it(tmp_path):
    program = tmp_path / "export" / "model.pt2"
    program.parent.mkdir()
    program.touch()
    inputs = prediction_inputs(given(tmp_path, f"exported={program}", "tta=false"))
    assert inputs.kind == EXPORTED and inputs.tta is False
    assert inputs.models == (program,)
    assert inputs.files == (program, program.with_suffix(".json"))
    assert inputs.folders == (program.parent.resolve(),)

