"""segnet's first import of MONAI leaves out the optional integrations MONAI would import with its
package (MLflow, Optuna, torchvision: seconds of every command's start-up), and afterwards they
import as usual; one imported before segnet is left alone."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from segnet.monai_import import HIDDEN_FROM_MONAI

PROBE = """
import json, sys
{before}
import segnet
import monai.transforms
loaded_with_monai = sorted(name for name in {hidden} if name in sys.modules)
import importlib
later = {{name: importlib.import_module(name).__name__ for name in {hidden}}}
from monai.handlers import mlflow_handler
print(json.dumps({{"with_monai": loaded_with_monai, "later": later,
                  "monai_sees_mlflow": type(mlflow_handler.mlflow).__name__}}))
"""


def probe(before: str = "") -> dict:
    code = PROBE.format(before=before, hidden=list(HIDDEN_FROM_MONAI))
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(any(importlib.util.find_spec(name) is None for name in HIDDEN_FROM_MONAI),
                    reason="needs the tracking, search and peer extras installed (make test installs them)")
def test_monai_imports_without_the_integrations_segnet_does_not_use_and_they_import_afterwards():
    seen = probe()
    assert seen["with_monai"] == []
    assert seen["later"] == {name: name for name in HIDDEN_FROM_MONAI}
    assert seen["monai_sees_mlflow"] == "_LazyRaise"  # MONAI's own MLflow handler: not installed, as far as it knows
    imported_first = probe("import mlflow")
    assert imported_first["with_monai"] == ["mlflow"] and imported_first["monai_sees_mlflow"] == "module"
