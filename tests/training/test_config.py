"""Every option of every config group composes and resolves; bad values give one clear line."""

from __future__ import annotations

import inspect

import pytest
from omegaconf import OmegaConf

from helpers.data import write_decathlon
from helpers.training import CONF, compose_config, run_train_script
from segnet.errors import ConfigError, DatasetError
from segnet.training.checks import resolve_run_backend
from segnet.training.train import train

GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir())


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_the_cpu_preset_trains_250_steps_on_the_cpu(tmp_path):
    root = write_decathlon(tmp_path / "Task")
    trainer = compose_config(["experiment=cpu", "data=folder", f"data.root={root}"]).trainer
    assert (trainer.accelerator, trainer.max_steps, trainer.max_epochs) == ("cpu", 250, -1)


def test_every_group_has_options():
    assert set(GROUPS) >= {"op", "model", "data", "trainer", "logger", "callbacks", "experiment", "profiler"}


@pytest.mark.parametrize(
    "group,option", [(g, o) for g in GROUPS for o in group_options(g)], ids=lambda v: str(v)
)
def test_option_composes_and_resolves(group, option, tmp_path):
    overrides = [f"{group}={option}"]
    if group == "recipe":  # a change to a plan's defaults: the options of a dataset folder's data
        overrides.append("data=folder")
    on_a_folder = (("data", "folder"), ("data", "decathlon"), ("experiment", "ablation_placement"),
                   ("experiment", "ablation_recipe"), ("experiment", "ablation_loss"), ("experiment", "search_loss"))
    if (group, option) in on_a_folder or group == "recipe":  # a dataset folder's
        overrides.append(f"data.root={write_decathlon(tmp_path / 'Task')}")
    cfg = compose_config(overrides, output_dir=tmp_path)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["model"]["spatial_dims"] == resolved["data"]["spatial_dims"]
    assert resolved["model"]["out_channels"] == resolved["data"]["num_classes"] == len(resolved["data"]["class_names"])
    if group == "op":
        assert resolved["op"]["backend"] == option


def test_slurm_launcher_is_sized_from_the_trainer():
    from hydra import compose, initialize_config_dir

    overrides = ["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.timeout_min=60",
                 "trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.partition, launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == ("gpu", 2, 4, 4)
    assert launcher.timeout_min == 60


def test_multirun_with_ddp_on_the_basic_launcher_is_refused_up_front(tmp_path):
    result = run_train_script(["-m", "trainer=ddp", "trainer.accelerator=cpu", "seed=0"], tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "error: multirun (-m) with trainer=ddp needs hydra/launcher=slurm" in result.stderr


def test_gpu_preset_trains_in_bf16_with_cudnn_autotuning(tmp_path):
    trainer = compose_config(["trainer=gpu"], output_dir=tmp_path).trainer
    assert (trainer.accelerator, trainer.precision, trainer.benchmark) == ("gpu", "bf16-mixed", True)


def test_folder_channels_and_classes_come_from_dataset_json(tmp_path):
    cfg = compose_config(["data=folder", f"data.root={write_decathlon(tmp_path / 'Task')}"], output_dir=tmp_path)
    assert cfg.model.in_channels == 1
    assert cfg.model.out_channels == 3
    assert list(cfg.data.class_names) == ["background", "core", "shell"]


def test_unknown_backend_is_rejected(tmp_path):
    cfg = compose_config(["op.backend=triton", "trainer=cpu"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match="op.backend=triton is not a backend; use one of python, cpp, cuda, auto"):
        resolve_run_backend(cfg)


def test_cuda_backend_without_gpu_says_what_to_use(tmp_path):
    cfg = compose_config(["op=cuda"], output_dir=tmp_path)
    with pytest.raises(
        ConfigError, match="op.backend=cuda needs a GPU trainer .* use op.backend=cpp or op.backend=auto"
    ):
        resolve_run_backend(cfg)


def test_auto_resolves_to_cpp_on_a_cpu_trainer(tmp_path):
    assert resolve_run_backend(compose_config(["trainer=cpu"], output_dir=tmp_path)) == "cpp"


def test_missing_data_root_is_reported(tmp_path):
    cfg = compose_config(["data=folder", "trainer=cpu"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match="data.root is required for data=folder"):
        train(cfg)


def test_data_root_that_does_not_exist_is_reported(tmp_path):
    cfg = compose_config(["data=folder", f"data.root={tmp_path / 'nowhere'}", "trainer=cpu"], output_dir=tmp_path)
    with pytest.raises(DatasetError, match="is not a folder"):
        train(cfg)


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "is not valid JSON"),
        ('{"modality": {"0": "MRI"}, "training": []}', 'has no "labels" entry'),
        ('{"labels": {"0": "bg", "1": "fg"}}', 'needs "modality" and "training"'),
        ('{"labels": {"0": "bg", "2": "fg"}, "modality": {"0": "CT"}, "training": [{"image": "a", "label": "b"}]}',
         "must number classes 0..K-1"),
        ('{"labels": {"0": "bg", "1": "fg"}, "modality": {"0": "CT"}, "training": [{"image": "./x.nii.gz", '
         '"label": "./y.nii.gz"}]}', "lists './x.nii.gz', which does not exist"),
    ],
    ids=["json", "labels", "layout", "label-values", "missing-file"],
)
def test_malformed_dataset_json_is_reported(tmp_path, content, message):
    root = tmp_path / "Task"
    root.mkdir()
    (root / "dataset.json").write_text(content)
    cfg = compose_config(["data=folder", f"data.root={root}", "trainer=cpu"], output_dir=tmp_path)
    with pytest.raises(DatasetError, match=message):
        train(cfg)


def test_class_names_must_match_the_class_count(tmp_path):
    cfg = compose_config(["data.num_classes=4", "trainer=cpu"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match="data.class_names has 3 names but data.num_classes=4"):
        train(cfg)


def test_missing_checkpoint_is_reported(tmp_path):
    cfg = compose_config([f"ckpt_path={tmp_path / 'none.ckpt'}", "trainer=cpu"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match="is not a file"):
        train(cfg)


@pytest.mark.parametrize("group,added,nearest", [("synthetic2d", "+data.batchsize=4", "data.batch_size"),
                                                 ("folder", "+data.pach_size=[8,8,8]", "data.patch_size")])
def test_a_data_key_that_nothing_reads_stops_the_run_with_the_nearest_one(tmp_path, group, added, nearest):
    """Hydra's advice for a misspelt key is +key: the key is added, and a catch-all argument of the
    data module would swallow it while the run trains with the plan's value."""
    dataset = write_decathlon(tmp_path / "Task", cases=3) if group == "folder" else None
    root = [f"data.root={dataset}", "data.fold=all"] if dataset else []
    cfg = compose_config([f"data={group}", *root, added], output_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match=f"data.{added[6:].split('=')[0]}: nothing in segnet reads .*"
                                          f"Did you mean {nearest}"):
        train(cfg)
    assert not (tmp_path / "run").exists()  # stopped before planning or writing anything


def test_the_data_modules_take_their_arguments_by_name():
    from segnet.training.folder_data import FolderDataModule
    from segnet.training.synthetic_data import SyntheticDataModule

    for module in (FolderDataModule, SyntheticDataModule):
        assert all(p.kind != p.VAR_KEYWORD for p in inspect.signature(module).parameters.values()), module


def test_an_experiment_preset_overrides_the_primary_config():
    cfg = compose_config(["experiment=ablation_placement", "data.root=???"])
    assert cfg.task_name == "ablation_placement" and cfg.data._target_.endswith("FolderDataModule")
    assert compose_config(["experiment=ablation_backends"]).task_name == "ablation_backends"
    assert compose_config(["variant=sharp_skips"]).model.skip_layer == "sharpen"
    assert list(compose_config(["variant=none"]).model.edge_placement) == []


def test_the_recipe_ablation_composes_each_part_over_the_plan_and_each_budget_after_the_trainer():
    base = ["experiment=ablation_recipe", "data.root=???"]
    plan = compose_config(base + ["recipe=plan", "budget=short"])
    assert plan.task_name == "ablation_recipe" and plan.data._target_.endswith("FolderDataModule")
    assert plan.callbacks.postprocessing_trials._target_.endswith("PostprocessingTrials")  # postprocessing on
    assert "postprocessing_trials" not in compose_config([]).callbacks  # a plain run scores no rules
    assert (plan.data.patch_scale, plan.data.batch_scale, plan.data.affine_augmentation) == (1.0, 1.0, True)
    assert (plan.trainer.max_steps, plan.trainer.max_epochs) == (250, -1)  # not trainer/default.yaml's -1 and 12
    assert compose_config(base + ["budget=long"]).trainer.max_steps == 1000
    assert compose_config(base + ["recipe=small_patch"]).data.patch_scale == 0.5
    assert compose_config(base + ["recipe=small_batch"]).data.batch_scale == 0.25
    assert compose_config(base + ["recipe=no_affine"]).data.affine_augmentation is False
    assert compose_config(base + ["recipe=deep_supervision"]).model.deep_supervision is True
    sized = compose_config(base + ["recipe=sized_network"]).model
    assert sized.channels is None and sized.strides is None and sized.deep_supervision is False
    assert compose_config(base + ["recipe=sgd_poly"]).optim.name == "sgd_poly"
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        sweep = compose(config_name="train", overrides=base, return_hydra_config=True).hydra.sweeper.params
    assert dict(sweep) == {"recipe": "plan,small_patch,no_affine,small_batch,deep_supervision,sized_network,sgd_poly",
                           "budget": "short,long",
                           "seed": "0,1,2", "data.fold": "0,1,2,3,4"}
