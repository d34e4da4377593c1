"""What the libraries under segnet print, down to what a user can act on: each event once, in
the command's own log format (and so in the run's log file), without adverts, and without the
warnings that only the libraries' own code could act on.

Lightning gives its top-level logger a console handler of its own at import and lets the same
records go on to the root logger, where Hydra's console and file handlers print them again:
every Lightning line twice on the console ("INFO: ..." and Hydra's), once in the log file.
Here that handler goes as soon as Lightning is imported, whoever imports it first.
"""

from __future__ import annotations

import logging
import sys
import warnings
from types import ModuleType

from segnet.import_hooks import WrappingLoader, at_first_import

# Warnings raised inside the libraries about the libraries' own calls: nothing in a command, a
# configuration or segnet's code changes them. (category, message at its start, module raising it)
LIBRARY_WARNINGS = (
    # torch deprecated LeafSpec; Lightning's pytree helper still makes one at every batch transfer
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\.pytorch\.utilities\._pytree"),
    # MONAI's surface distances (HD95) pass MONAI's own deprecated argument
    (FutureWarning, r"monai\.metrics\.utils get_mask_edges:always_return_as_numpy", r"monai\.utils\.deprecate_utils"),
    # segnet's module augments batches on the device (on_after_batch_transfer) by design
    (UserWarning, r"You have overridden `on_after_batch_transfer` in `LightningModule` but have passed in a "
                  r"`LightningDataModule`", r"lightning\.pytorch"),
    # every MONAI loader makes MONAI's GPU DICOM reader where pydicom is installed (the dicom extra),
    # which warns that its optional GPU decoder is not; segnet reads DICOM through SimpleITK
    (UserWarning, r"NvImgCodecPydicomReader: nvImageCodec decoder plugin did not register", r"monai\.data"),
)
# ... and logs the same, once per loader, through this logger
MONAI_DICOM_DECODER = "monai.data.nvimgcodec_pydicom_plugin"
ADVERT = "💡 Tip:"  # how Lightning starts its suggestions to install its cloud products


def ignore_library_warnings() -> None:
    for category, message, module in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


class WithoutAdverts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(ADVERT)


def lightning_through_root(lightning: ModuleType) -> None:
    """Lightning's records printed by the root logger's handlers alone, without its adverts."""
    logger = logging.getLogger(lightning.__name__)
    for handler in list(logger.handlers):
        if handler is getattr(lightning, "_console", None):
            logger.removeHandler(handler)
    # Lightning's rank-zero messages (its adverts among them) are made by this logger
    advertiser = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, WithoutAdverts) for f in advertiser.filters):
        advertiser.addFilter(WithoutAdverts())


class _RoutingLoader(WrappingLoader):
    """Lightning's own loader, then its logging routed as above."""

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        lightning_through_root(module)


def install() -> None:
    """At segnet's import (segnet/__init__.py): the warning filters, and Lightning's logging set
    up as above now or, as usual, when it is first imported."""
    ignore_library_warnings()
    logging.getLogger(MONAI_DICOM_DECODER).setLevel(logging.ERROR)
    if "lightning" in sys.modules:
        lightning_through_root(sys.modules["lightning"])
    at_first_import("lightning", _RoutingLoader)
