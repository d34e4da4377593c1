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

import sys
from types import ModuleType

from segnet.import_hooks import WrappingLoader, at_first_import

HIDDEN_FROM_MONAI = ("mlflow", "optuna", "torchvision")


class _HidingLoader(WrappingLoader):
    """MONAI's own loader, run with the hidden libraries marked unimportable."""

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


def install() -> None:
    """Before MONAI is first imported (segnet/__init__.py); nothing when it already is."""
    at_first_import("monai", _HidingLoader)
