"""Where conf/ is, the name of a run's own configuration file, and the OmegaConf resolvers conf/
uses: ${dataset:ROOT,FIELD} reads a dataset folder's dataset.json, so channel and class counts are
never typed twice; ${network_outputs:CLASSES,REGIONS} is the network's output channels (one per
class, or one sigmoid per region); ${runnable_backends:} is the sweep list of op backends this
machine can run; ${sqlite_file:PATH} is the SQLite URL of a database file, its folder made (a
search's study lives in its sweep folder, which Hydra makes only once the first trial starts)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

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


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("dataset"):
        OmegaConf.register_new_resolver("dataset", _dataset_field)
    if not OmegaConf.has_resolver("network_outputs"):
        OmegaConf.register_new_resolver("network_outputs", network_outputs)
    if not OmegaConf.has_resolver("runnable_backends"):
        OmegaConf.register_new_resolver("runnable_backends", runnable_backends)
    if not OmegaConf.has_resolver("sqlite_file"):
        OmegaConf.register_new_resolver("sqlite_file", sqlite_file)
