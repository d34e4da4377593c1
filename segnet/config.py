"""Where conf/ is, the name of a run's own configuration file, and the OmegaConf resolvers conf/
uses: ${dataset:ROOT,FIELD} reads a dataset folder's dataset.json, so channel and class counts are
never typed twice; ${network_outputs:CLASSES,REGIONS} is the network's output channels (one per
class, or one sigmoid per region); ${runnable_backends:} is the sweep list of op backends this
machine can run; ${sqlite_file:PATH} is the SQLite URL of a database file, its folder made (a
search's study lives in its sweep folder, which Hydra makes only once the first trial starts);
${search_study:ROOT,FOLDS,FOLD,OBJECTIVE} names a search's study by what its trials are compared
on; ${mlflow_artifacts:TRACKING_URI} is where MLflow keeps a run's files: beside a SQLite store.
(${command_help:}, the --help of a command, is the commands' own: segnet.commands.)"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import ListConfig, OmegaConf

from segnet.data.dataset_json import describe_dataset

# Inside the package in a wheel (setup.py puts it there), beside it in a checkout.
_PACKAGED_CONF = Path(__file__).resolve().parent / "conf"
CONF = _PACKAGED_CONF if _PACKAGED_CONF.is_dir() else Path(__file__).resolve().parent.parent / "conf"
# In a training run's folder: the configuration that trained, resolved, plan and defaults included
# (segnet.training.run_config); Hydra's .hydra/config.yaml is the one composed from the command line.
RUN_CONFIG = "config.yaml"


def _dataset_field(root: str, field: str):
    value = getattr(describe_dataset(str(root)), field)
    return list(value) if isinstance(value, tuple) else value


def network_outputs(num_classes: int, regions) -> int:
    """A softmax channel per class, background included; or a sigmoid channel per region (the
    background is no region)."""
    return num_classes - 1 if regions else num_classes


def runnable_backends() -> str:
    """Comma-separated, as a Hydra sweep value: python and cpp everywhere, cuda with a GPU."""
    import torch  # only where a configuration asks: the commands compose without torch

    return "python,cpp,cuda" if torch.cuda.is_available() else "python,cpp"


def sqlite_file(path: str) -> str:
    folder = Path(path).parent
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(path).resolve()}"


def search_study(dataset_root: str | None, folds, fold, objective: str) -> str:
    """The study a search's trials belong to, named by what makes their objectives comparable: the
    dataset (its folder's name, which a moved copy keeps), the folds each trial scores (`folds`, or
    the run's one fold) and the objective, e.g. Dataset001_Lung-folds_0_1_2-val_dice_mean. The
    search on another dataset or folds is then another study, in a folder of its own. Without a
    dataset the name leaves it out: the first trial's check then says what is missing, in one line."""
    dataset = [Path(os.path.abspath(dataset_root)).name] if dataset_root else []
    scored = f"folds_{'_'.join(str(f) for f in folds)}" if isinstance(folds, (list, ListConfig)) and folds \
        else f"fold_{fold}"
    return "-".join([*dataset, scored, str(objective)])


def mlflow_artifacts(tracking_uri: str) -> str | None:
    """mlruns/ beside a SQLite store (sqlite:///PATH, PATH relative to the working folder as
    SQLAlchemy reads it), as a file URI. MLflow's own default, ./mlruns, is taken from the working
    folder of whichever run creates the experiment. None, MLflow's choice, for other stores: a
    server's own artifact store, a file store's own folder."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database = tracking_uri.removeprefix("sqlite:///").partition("?")[0]
    return (Path(os.path.abspath(database)).parent / "mlruns").as_uri()


def run_name(output_dir: str) -> str:
    """A run's name in the experiment trackers: its run folder's name, with its parent's where the
    name alone repeats from sweep to sweep (a sweep's job number, a fold's fold_<k>)."""
    folder = Path(output_dir)
    repeated = folder.name.isdigit() or folder.name.startswith("fold_")
    return f"{folder.parent.name}/{folder.name}" if repeated else folder.name


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("dataset"):
        OmegaConf.register_new_resolver("dataset", _dataset_field)
    if not OmegaConf.has_resolver("network_outputs"):
        OmegaConf.register_new_resolver("network_outputs", network_outputs)
    if not OmegaConf.has_resolver("runnable_backends"):
        OmegaConf.register_new_resolver("runnable_backends", runnable_backends)
    if not OmegaConf.has_resolver("sqlite_file"):
        OmegaConf.register_new_resolver("sqlite_file", sqlite_file)
    if not OmegaConf.has_resolver("search_study"):
        OmegaConf.register_new_resolver("search_study", search_study)
    if not OmegaConf.has_resolver("mlflow_artifacts"):
        OmegaConf.register_new_resolver("mlflow_artifacts", mlflow_artifacts)
    if not OmegaConf.has_resolver("run_name"):
        OmegaConf.register_new_resolver("run_name", run_name)
