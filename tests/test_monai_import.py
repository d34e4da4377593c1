"""segnet's first import of MONAI leaves out the optional integrations MONAI would import with its
package (MLflow, Optuna, torchvision: seconds of every command's start-up), and afterwards they
import as usual; one imported before segnet is left alone."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types

import pytest

from segnet.monai_import import HIDDEN_FROM_MONAI, _HidingLoader

PROBE = f"""
import json, sys
import segnet
import monai.transforms
with_monai = sorted(name for name in {list(HIDDEN_FROM_MONAI)} if name in sys.modules)
import mlflow
from monai.handlers import mlflow_handler
print(json.dumps({{"with_monai": with_monai, "later": type(mlflow.start_run).__name__,
                  "monai_sees_mlflow": type(mlflow_handler.mlflow).__name__}}))
"""


@pytest.mark.skipif(any(importlib.util.find_spec(name) is None for name in HIDDEN_FROM_MONAI),
                    reason="needs the tracking, search and peer extras installed (make test installs them)")
def test_monai_imports_without_the_integrations_segnet_does_not_use_and_they_import_afterwards():
    ran = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen["with_monai"] == []
    assert seen["later"] == "function"  # the real MLflow, for Lightning's logger
    assert seen["monai_sees_mlflow"] == "_LazyRaise"  # MONAI's own MLflow handler: not installed, as far as it knows


def test_a_library_imported_before_monai_is_left_to_it(monkeypatch):
    seen = {}

    class Recording:
        def exec_module(self, module):
            seen.update({name: sys.modules.get(name, "absent") for name in HIDDEN_FROM_MONAI})

    imported = types.ModuleType("mlflow")
    monkeypatch.setitem(sys.modules, "mlflow", imported)
    for name in HIDDEN_FROM_MONAI[1:]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    _HidingLoader(Recording()).exec_module(types.ModuleType("monai"))
    assert seen == {"mlflow": imported, **{name: None for name in HIDDEN_FROM_MONAI[1:]}}
    assert sys.modules["mlflow"] is imported and not set(HIDDEN_FROM_MONAI[1:]) & set(sys.modules)
