"""segnet's installed commands (segnet-train, segnet-plan, ... in pyproject.toml), each a Hydra
main over one of conf/'s top-level configs that registers the resolvers first and turns the
errors a user can fix into one line.

A command names its work as "module:function", imported only once Hydra has composed the
configuration: `--help`, `--cfg job` and a bad override answer without loading torch, Lightning
or MONAI (seconds of imports that a user waiting for a one-line answer should not pay). Its
check, another "module:function" from a module that loads neither, runs before the work is
imported: a missing argument or file, or a dataset that cannot make the folds, is answered as
quickly."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from segnet.command_help import help_text
from segnet.config import CONF, register_resolvers
from segnet.config_keys import check_keys
from segnet.errors import ConfigError, user_errors_as_one_line
from segnet.progress import starting
from segnet.unused_run_folder import removed_if_failed_unused

# Arguments that choose Hydra's run folder or its files themselves.
HYDRA_RUN_KEYS = ("hydra.run.dir=", "hydra.output_subdir=", "hydra/job_logging=")
# Arguments that need an optional Hydra plugin: the module it installs, and the extra that installs it.
PLUGINS = {("hydra/sweeper=optuna", "experiment=search_loss"): ("hydra_plugins.hydra_optuna_sweeper", "search"),
           ("hydra/launcher=slurm", "hydra/launcher=submitit_slurm", "hydra/launcher=submitit_local"):
           ("hydra_plugins.hydra_submitit_launcher", "slurm")}
# What makes Hydra run in a folder without writing its .hydra/ or a log file there.
WITHOUT_HYDRA_FILES = ["hydra.output_subdir=null", "hydra/job_logging=stdout"]


def check_plugins(arguments: list[str]) -> None:
    """A ConfigError naming the extra to install where an argument needs a plugin that is missing
    (Hydra itself would only say that it cannot find the option)."""
    for asking, (module, extra) in PLUGINS.items():
        given = [argument for argument in arguments if argument in asking]
        if given and importlib.util.find_spec(module) is None:
            raise ConfigError(f"{given[0]} needs a Hydra plugin that is not installed: pip install -e '.[{extra}]' "
                              f"(segnet's {extra} extra)")


@dataclass(frozen=True)
class Command:
    """An installed command `name`: Hydra's main over conf/<config_name>.yaml, after its keys are
    checked (segnet.config_keys) and `rewrite` has mapped each command-line argument to what Hydra
    should see. Its `--help` (segnet.command_help) says what it does (`description`), and shows
    `examples`. A command that writes to `output=` has
    `output_folder`, the folder its output goes into: given output=, Hydra runs there and writes
    neither its .hydra/ nor a log file, so the command leaves its output and nothing else (no
    dated folder under outputs/). A command whose arguments ask it to write nothing (`writes_nothing`,
    segnet-plan --verify) runs in the working folder the same way: it leaves no folder at all."""

    name: str
    config_name: str
    run: Callable[[], Any]
    description: str
    examples: tuple[str, ...]
    rewrite: Callable[[str], str] = str
    output_folder: Callable[[PurePath], PurePath] | None = None
    writes_nothing: Callable[[list[str]], bool] = lambda arguments: False

    def overrides(self, arguments: list[str]) -> list[str]:
        rewritten = [self.rewrite(argument) for argument in arguments]
        return rewritten + self.run_in_output_folder(rewritten)

    def run_in_output_folder(self, arguments: list[str]) -> list[str]:
        """The overrides that make Hydra's run folder the output's own folder, without its files;
        none where the output is not named, or the run folder or a sweep is."""
        if any(a in ("-m", "--multirun") or a.startswith(HYDRA_RUN_KEYS) for a in arguments):
            return []
        if self.writes_nothing(arguments):
            return ["hydra.run.dir=.", *WITHOUT_HYDRA_FILES]
        if self.output_folder is None:
            return []
        # (+output= is refused before: output is a key already)
        named = [a.partition("=")[2] for a in arguments if a.startswith(("output=", "++output="))]
        if not named:
            return []
        try:
            value = OverridesParser.create().parse_override(f"output={named[-1]}").value()
        except HydraException:  # Hydra reports the malformed argument itself
            return []
        if not isinstance(value, str):
            return []
        folder = str(self.output_folder(PurePath(value)))
        quote = "'" if "'" not in folder else '"'
        if quote in folder:  # both quotes in the path: Hydra's default run folder, as without output=
            return []
        return [f"hydra.run.dir={quote}{folder}{quote}", *WITHOUT_HYDRA_FILES]

    def __call__(self) -> Any:
        register_resolvers()
        if not OmegaConf.has_resolver("command_help"):
            OmegaConf.register_new_resolver("command_help", command_help)
        arguments = [self.rewrite(argument) for argument in sys.argv[1:]]
        with user_errors_as_one_line():
            check_plugins(arguments)
            check_keys(self.name, self.config_name, arguments)
        sys.argv = [sys.argv[0], *self.overrides(sys.argv[1:])]
        return self.run()


def imported(work: str) -> Callable[[DictConfig], Any]:
    """The function that "package.module:function" names."""
    module, _, name = work.partition(":")
    return getattr(importlib.import_module(module), name)


def hydra_command(name: str, config_name: str, work: str, description: str, examples: tuple[str, ...],
                  check: str | None = None, rewrite: Callable[[str], str] = str, result: str | None = None,
                  output_folder: Callable[[PurePath], PurePath] | None = None,
                  writes_nothing: Callable[[list[str]], bool] = lambda arguments: False) -> Command:
    """The command `name` that runs `check`, then `work` (each "module:function") on the composed
    `config_name`, with errors a user can fix in one line; it returns what `work` returns, or its
    entry that the configuration's key `result` names (what a Hydra sweeper optimizes)."""

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name=config_name)
    def run(cfg: DictConfig) -> Any:
        starting()  # the first line, before the check and the work import torch and the rest
        with removed_if_failed_unused(), user_errors_as_one_line():
            if check is not None:
                imported(check)(cfg)
            returned = imported(work)(cfg)
        return returned if result is None else returned[cfg[result]]

    return Command(name, config_name, run, description, examples, rewrite, output_folder, writes_nothing)


# The installed commands (pyproject.toml's [project.scripts]); train.py and scripts/<command>.py
# run the same. Each description is its --help's first paragraph.

segnet_train = hydra_command(
    "segnet-train", "train", "segnet.training.train_command:train_command",
    """Train a segmentation model (the same as python train.py). Configuration lives in conf/
    (Hydra): choose a group's option with group=option, set a key with key=value, e.g.
    op.backend=cuda compile=true. The run folder gets config.yaml (what trained), checkpoints,
    TensorBoard logs and metrics.json. It returns the metrics.json entry `objective` names (the final
    validation's mean Dice), what a Hydra sweeper optimizes; with folds=[...], their mean.""",
    ("segnet-train data=folder data.root=/data/Dataset001_Lung data.fold=0",
     "segnet-train trainer.max_epochs=50 optim.lr=1e-3 seed=1"),
    check="segnet.training.checks:check_training_config", result="objective")


def _verify_flag(argument: str) -> str:
    return "verify=true" if argument == "--verify" else argument  # nnU-Net's flag; Hydra takes key=value


segnet_plan = hydra_command(
    "segnet-plan", "plan", "segnet.planning.plan:plan_command",
    """A dataset's fingerprint and plan (segnet-plan data.root=DATASET [output=plans.json]
    [data.memory_budget_gb=8]), or with --verify its integrity check alone, like
    nnUNetv2_plan_and_preprocess and its --verify_dataset_integrity. Training plans by itself when
    no plan is given; this writes one to read, edit or share, and training takes it back with
    data.plan=PATH. --verify lists every broken case and exits non-zero.""",
    ("segnet-plan data.root=/data/Dataset001_Lung output=plans/plans.json",
     "segnet-plan --verify data.root=/data/Dataset001_Lung"),
    rewrite=_verify_flag, output_folder=lambda output: output.parent,
    writes_nothing=lambda arguments: "verify=true" in arguments)

segnet_preprocess = hydra_command(
    "segnet-preprocess", "preprocess", "segnet.preprocessing.preprocess:preprocess_command",
    """The dataset planned (or its plan read: data.plan=plans.json) and every labelled case
    written to the preprocessed cache that training reads, like nnUNetv2_preprocess; training
    builds it itself when missing, this does it ahead (a CPU job before the GPU jobs).""",
    ("segnet-preprocess data.root=/data/Dataset001_Lung",
     "segnet-preprocess data.root=/data/Dataset001_Lung data.spatial_dims=2 data.num_workers=8"))


def _exported_package(argument: str) -> str:
    # model=PATH.pt2 names an exported package; Hydra would take `model` for the config group
    # conf/model/, so it reaches the configuration as `exported`.
    return "exported=" + argument.removeprefix("model=") if argument.startswith("model=") else argument


segnet_predict = hydra_command(
    "segnet-predict", "predict", "segnet.inference.predict:predict_command",
    """Segment new images, like nnUNetv2_predict: from a training checkpoint (ckpt_path=CKPT, or a
    list of them: an ensemble) or from model=PATH (an exported package, segnet-export's model.pt2
    or model.onnx, or a model package, segnet-export-model's MODEL.zip), input=IMAGES (a folder or a file)
    into output=FOLDER.""",
    ("segnet-predict ckpt_path=runs/fold0/checkpoints/final.ckpt input=imagesTs output=predictions",
     "segnet-predict model=MODEL.zip input=imagesTs output=predictions tta=false"),
    check="segnet.inference.prediction_arguments:prediction_inputs", rewrite=_exported_package,
    output_folder=lambda output: output)

segnet_evaluate = hydra_command(
    "segnet-evaluate", "evaluate", "segnet.evaluation.evaluate:evaluate_command",
    """Score a checkpoint on a dataset's split, nnU-Net style: summary.json (metric_per_case, mean,
    foreground_mean), per_case.csv, predictions/<case>.nii.gz (in each image's own geometry and
    format) and, per class, cases_<class>.png (its worst, median and best case) in the run
    folder.""",
    ("segnet-evaluate ckpt_path=runs/fold0/checkpoints/final.ckpt data.root=/data/Dataset001_Lung",
     "segnet-evaluate ckpt_path=runs/fold0/checkpoints/final.ckpt data.root=/data/Dataset001_Lung "
     "data.split=test tta=false"),
    check="segnet.evaluation.evaluation_arguments:evaluation_inputs")

segnet_postprocess = hydra_command(
    "segnet-postprocess", "postprocess", "segnet.postprocessing.postprocess:postprocess_command",
    """Which connected-component rules raise the cross-validation's mean Dice, like nnU-Net's
    postprocessing determination: each run (runs=[...], one per fold) predicts the cases it was
    validated on; the rules go into postprocessing.json in every run folder, which segnet-predict
    and segnet-evaluate apply.""",
    ("segnet-postprocess data.root=/data/Dataset001_Lung 'runs=[runs/fold0,runs/fold1,runs/fold2]'",
     "segnet-postprocess data.root=/data/Dataset001_Lung 'runs=[runs/fold0,runs/fold1]' device=cpu"))

segnet_find_best_configuration = hydra_command(
    "segnet-find-best-configuration", "find_best", "segnet.postprocessing.find_best:find_best_command",
    """Which configuration, or pair's ensemble, scores best on the cross-validation, like
    nnUNetv2_find_best_configuration: runs=[...] lists every configuration's folds; the choice, its
    paired statistics, its postprocessing and the segnet-predict command go into the output
    folder.""",
    ("segnet-find-best-configuration data.root=/data/Dataset001_Lung 'runs=[runs/2d_fold0,runs/3d_fold0]'",
     "segnet-find-best-configuration data.root=/data/Dataset001_Lung 'runs=[runs/2d_fold0,runs/3d_fold0]' tta=false"))

segnet_export_model = hydra_command(
    "segnet-export-model", "export_model", "segnet.export.export_model:export_model_command",
    """The runs' final weights, plans, configurations and postprocessing in one file, like
    nnUNetv2_export_model_to_zip: runs=[...] or choice=best_configuration.json
    (segnet-find-best-configuration's); segnet-predict model=MODEL.zip predicts from it alone.""",
    ("segnet-export-model 'runs=[runs/fold0,runs/fold1]' output=MODEL.zip",
     "segnet-export-model choice=best/best_configuration.json output=MODEL.zip"),
    output_folder=lambda output: output.parent)

segnet_export = hydra_command(
    "segnet-export", "export", "segnet.export.export_checkpoint:export_command",
    """A trained network as a torch.export program or an AOTInductor package (format=) with
    model.json beside it, then run once on its own (torch and the op library alone) to prove it
    deploys; or as ONNX's standard operators (format=onnx output=PATH.onnx). segnet-predict
    model=PATH.pt2 (or PATH.onnx) predicts with it.""",
    ("segnet-export ckpt_path=runs/fold0/checkpoints/final.ckpt output=exported/model.pt2",
     "segnet-export ckpt_path=runs/3d_fold0/checkpoints/final.ckpt format=onnx output=deploy/model.onnx"),
    output_folder=lambda output: output.parent)

# Each command by its configuration's name: the one whose --help Hydra asks for (segnet.command_help).
COMMANDS = {command.config_name: command for command in (
    segnet_train, segnet_plan, segnet_preprocess, segnet_predict, segnet_evaluate, segnet_postprocess,
    segnet_find_best_configuration, segnet_export_model, segnet_export)}


def command_help(_root_: DictConfig) -> str:
    """The resolver of conf/hydra/default.yaml's hydra.help.template: the --help of the command
    that composed `_root_`."""
    command = COMMANDS[_root_.hydra.job.config_name]
    return help_text(command.name, command.description, command.examples, _root_)
