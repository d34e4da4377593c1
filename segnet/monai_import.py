"""MONAI's first import without the optional integrations segnet never uses through it.

`import monai` (which any `from monai.x import y` runs first) imports every module of the
package, and each module imports the optional libraries it integrates when they are installed:
MLflow (its handlers), Optuna (Auto3DSeg's search) and torchvision (its torchvision-based
networks). With the tracking, search and peer extras installed they add about 2-3 s to every
command's start-up, for code segnet never calls. While MONAI's package runs its imports, these
libraries are hidden from it (MONAI records them as not installed, which only its own handlers,
Auto3DSeg and torchvision networks would notice); afterwards they import as usual, for
Lightning's MLflow logger, Hydra's Optuna sweeper and anything else. A library already imported
is left alone.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

HIDDEN_FROM_MONAI = ("mlflow", "optuna", "torchvision")


class _HidingLoader(importlib.abc.Loader):
    """MONAI's own loader, run with the hidden libraries marked unimportable."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        hidden = [name for name in HIDDEN_FROM_MONAI if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # `import name` raises ImportError, which MONAI's optional_import takes
        try:
            self.loader.exec_module(module)
        finally:
            for name in hidden:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]

    def __getattr__(self, name: str):
        return getattr(self.loader, name)  # resources, source and the rest, as the real loader has them


class _MonaiFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "monai":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _HidingLoader(spec.loader)
        return spec


def install() -> None:
    """Before MONAI is first imported (segnet/__init__.py); nothing when it already is."""
    if "monai" not in sys.modules and not any(isinstance(finder, _MonaiFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MonaiFinder())
