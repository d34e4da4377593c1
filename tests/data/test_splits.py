"""Training/validation splits as nnU-Net makes them: k folds seeded apart from training,
splits_final.json when the dataset has one, recorded in the run folder and read back by
evaluation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.model_selection import KFold

from helpers.data import write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.splits import choose_split, kfold
from segnet.errors import ConfigError
from segnet.evaluation.evaluator import select_cases
from segnet.training.train import train


def sklearn_folds(names: list[str], folds: int, seed: int) -> list[dict[str, list[str]]]:
    """scikit-learn's KFold(shuffle=True) over the sorted names, as nnU-Net's generate_crossval_split lists it."""
    ordered = sorted(names)
    return [{"train": [ordered[i] for i in train], "val": [ordered[i] for i in val]}
            for train, val in KFold(n_splits=folds, shuffle=True, random_state=seed).split(ordered)]


def test_folds_partition_the_cases_like_scikit_learns_kfold():
    names = [f"case_{i:03d}" for i in range(11)]
    folds = kfold(list(reversed(names)), 5, seed=12345)  # the order given does not matter
    assert [len(f["val"]) for f in folds] == [3, 2, 2, 2, 2]  # the first n % k folds hold one more
    assert sorted(n for f in folds for n in f["val"]) == names  # every case validated exactly once
    for f in folds:
        assert sorted(f["train"] + f["val"]) == names and not set(f["train"]) & set(f["val"])
        assert f["train"] == sorted(f["train"]) and f["val"] == sorted(f["val"])
    assert kfold(names, 5, seed=12345) == folds and kfold(names, 5, seed=1) != folds
    assert folds == sklearn_folds(names, 5, 12345)


@pytest.mark.parametrize("seed", [0, 1, 42, 12345, 2**32 - 1])
@pytest.mark.parametrize("cases,folds", [(2, 2), (5, 5), (7, 2), (11, 5), (23, 5), (40, 3), (101, 10)])
def test_folds_are_scikit_learns_kfold_over_the_sorted_names(cases, folds, seed):
    # Unpadded numbers: sorted as strings (case_10 before case_2), the order nnU-Net sorts them in.
    names = [f"case_{i}" for i in range(cases)]
    assert sorted(names) != names or cases < 11
    given = [names[i] for i in np.random.RandomState(cases).permutation(cases)]  # the order given does not matter
    assert kfold(given, folds, seed) == sklearn_folds(names, folds, seed)


def test_dataset_splits_final_json_wins(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=4)
    custom = [{"train": ["case_000", "case_001"], "val": ["case_002", "case_003"]},
              {"train": ["case_002", "case_003"], "val": ["case_000", "case_001"]}]
    (root / "splits_final.json").write_text(json.dumps(custom))
    split = choose_split(describe_dataset(str(root)), 1, 5, 12345)
    assert [c.name for c in split.val] == ["case_000", "case_001"] and split.source.endswith("splits_final.json")
    with pytest.raises(ConfigError, match=r"data.fold=2, but .*splits_final.json has 2 fold\(s\)"):
        choose_split(describe_dataset(str(root)), 2, 5, 12345)


def test_fold_all_and_bad_folds(tmp_path):
    description = describe_dataset(str(write_decathlon(tmp_path / "Task", cases=4)))
    everything = choose_split(description, "all", 5, 12345)
    assert everything.train == everything.val and len(everything.val) == 4
    with pytest.raises(ConfigError, match="4 training case.s. cannot make data.num_folds=5 folds"):
        choose_split(description, 0, 5, 12345)


@pytest.mark.parametrize("seed", [0, 7])
def test_run_records_its_split_and_evaluation_reads_it(tmp_path, seed):
    root = write_decathlon(tmp_path / "Task", cases=4)
    run = tmp_path / "run"
    train(compose_config(["data=folder", f"data.root={root}", "data.num_folds=4", "data.fold=2",
                          "data.steps_per_epoch=1", "data.patch_size=[16,16,16]", "data.num_workers=0",
                          "data.batch_size=1", f"seed={seed}", *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    recorded = json.loads((run / "splits.json").read_text())
    expected = kfold([f"case_{i:03d}" for i in range(4)], 4, 12345)[2]
    assert recorded["fold"] == 2 and recorded["val"] == expected["val"]  # whatever the training seed
    assert recorded["train"] == expected["train"]
    description = describe_dataset(str(root))
    # evaluation takes the recorded split, even where the data settings would now make another
    recorded["val"] = ["case_003"]
    (run / "splits.json").write_text(json.dumps(recorded))
    hparams = {"fold": 0, "num_folds": 4, "split_seed": 12345}
    assert [c.name for c in select_cases(description, "validation", hparams, run / "splits.json")] == ["case_003"]
    assert [c.name for c in select_cases(description, "validation", hparams, None)] == kfold(
        [f"case_{i:03d}" for i in range(4)], 4, 12345)[0]["val"]
