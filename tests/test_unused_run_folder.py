"""A failed command's run folder goes when it holds nothing but Hydra's files, with the empty
parents Hydra made for it below the working folder; a folder with anything else in it stays, and
so does the working folder."""

from __future__ import annotations

from pathlib import Path

from segnet.unused_run_folder import remove_if_unused

HYDRA_FILES = {".hydra", "train.log"}


def hydra_folder(folder: Path) -> Path:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (folder / "train.log").write_text("started\n")
    return folder


def test_a_folder_of_hydra_files_goes_with_its_empty_parents(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kept = tmp_path / "outputs" / "predict" / "earlier"
    kept.mkdir(parents=True)
    remove_if_unused(hydra_folder(tmp_path / "outputs" / "train" / "2026-01-01_00-00-00"), HYDRA_FILES)
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")] == ["outputs", "outputs/predict",
                                                                                  "outputs/predict/earlier"]


def test_a_folder_with_a_result_stays(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = hydra_folder(tmp_path / "run")
    (run / "plans.json").write_text("{}")
    remove_if_unused(run, HYDRA_FILES)
    assert sorted(p.name for p in run.iterdir()) == [".hydra", "plans.json", "train.log"]


def test_the_working_folder_stays(tmp_path, monkeypatch):
    here = hydra_folder(tmp_path / "here")
    monkeypatch.chdir(here)
    remove_if_unused(here, HYDRA_FILES)
    remove_if_unused(tmp_path, HYDRA_FILES)
    assert sorted(p.name for p in here.iterdir()) == [".hydra", "train.log"]
