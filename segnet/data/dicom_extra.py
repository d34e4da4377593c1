"""The `dicom` extra's libraries (SimpleITK for NRRD, MHA and DICOM series; pydicom and highdicom
for DICOM), imported when a file needs them, so that the core, NIfTI and natural images never do."""

from __future__ import annotations

import importlib
from types import ModuleType

from segnet.errors import ConfigError


def extra_module(name: str) -> ModuleType:
    """The extra's module `name`; where it is missing, the one line that installs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ConfigError(f"NRRD, MHA and DICOM files need {name}: pip install -e '.[dicom]'") from None
