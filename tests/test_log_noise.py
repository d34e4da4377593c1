"""What segnet's commands print is what a user can act on: no reader's failure for a file another
reader reads, each Lightning event once and without adverts, no warning from inside a library
about its own calls, one line for a stop, and no "not resumable" warning at a resume that is
exact (segnet.library_output, segnet.data.image_files, segnet.training.signals)."""

from __future__ import annotations

import logging
import signal
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from helpers.logs import noise
from helpers.stops import signal_at
from helpers.training import compose_config, tiny_overrides
from segnet.library_output import ignore_library_warnings


def test_images_load_without_a_reader_s_failure_in_the_log(tiny_task, tmp_path, caplog):
    from monai import transforms as T

    from segnet.data.image_files import image_loader
    from segnet.data.transforms import load_transforms

    picture = tmp_path / "case.png"
    Image.fromarray(np.arange(48, dtype=np.uint8).reshape(6, 8)).save(picture)
    image, label = tiny_task / "imagesTr" / "case_000.nii.gz", tiny_task / "labelsTr" / "case_000.nii.gz"
    with caplog.at_level(logging.DEBUG):
        volume = image_loader()(image)
        loaded = T.Compose(load_transforms(with_label=True))({"image": str(image), "label": str(label)})
        natural = image_loader()(picture)
    assert [record.getMessage() for record in caplog.records if "unable to load" in record.getMessage()] == []
    assert volume.shape == (20, 24, 16) and sorted(loaded["label"].shape) == [1, 16, 20, 24]  # reoriented
    assert natural.shape == (6, 8, 1) and natural[1, 2, 0] == 10  # rows, columns, one slice


def test_lightning_logs_through_the_command_s_handlers_once_without_adverts(caplog):
    import lightning
    from lightning.pytorch.utilities.rank_zero import rank_zero_info

    # Hydra's handlers are the root logger's: a handler of Lightning's own would print each line again
    assert logging.getLogger("lightning").handlers == [] and logging.getLogger("lightning").propagate
    assert not hasattr(lightning, "_console") or lightning._console not in logging.getLogger("lightning").handlers
    with caplog.at_level(logging.INFO):
        rank_zero_info("💡 Tip: For seamless cloud logging, try installing [litlogger]")
        rank_zero_info("GPU available: False, used: False")
    assert [record.getMessage() for record in caplog.records] == ["GPU available: False, used: False"]


def test_library_warnings_no_user_can_act_on_are_left_out_and_no_other(tmp_path):
    from lightning.pytorch.utilities._pytree import _tree_flatten
    from monai.metrics import compute_hausdorff_distance

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ignore_library_warnings()  # as segnet's import does; pytest resets the filters for each test
        _tree_flatten(torch.zeros(2))  # torch's deprecated LeafSpec, made by Lightning at every batch transfer
        sphere = torch.zeros(1, 2, 8, 8, 8)
        sphere[:, 1, 2:6, 2:6, 2:6] = 1
        sphere[:, 0] = 1 - sphere[:, 1]
        compute_hausdorff_distance(sphere, sphere, percentile=95)  # MONAI's own deprecated argument
        warnings.warn_explicit("You have overridden `on_after_batch_transfer` in `LightningModule` but have passed "
                               "in a `LightningDataModule`. It will use the implementation from `LightningModule` "
                               "instance.", UserWarning, "data_connector.py", 378,
                               module="lightning.pytorch.trainer.connectors.data_connector")
        # what a user can act on stays: another library deprecation, a warning of Lightning's about settings
        warnings.warn_explicit("`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning, "mine.py", 1,
                               module="my_code")
        warnings.warn_explicit("The number of training batches (4) is smaller than the logging interval",
                               UserWarning, "fit_loop.py", 321, module="lightning.pytorch.loops.fit_loop")
    assert [(w.category, w.filename) for w in caught] == [(FutureWarning, "mine.py"), (UserWarning, "fit_loop.py")]


def test_a_ctrl_c_says_one_line_and_the_same_command_resumes_without_a_warning(tmp_path, caplog):
    from segnet.training.train import train

    overrides = [*tiny_overrides(), "op=python", "trainer.max_epochs=2"]  # 2 steps an epoch
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as stopped:
        train(compose_config([*overrides, *signal_at("SIGINT", 3, "training")], output_dir=tmp_path))
    assert stopped.value.code == 128 + signal.SIGINT
    last = tmp_path / "checkpoints" / "last.ckpt"
    said = [record.getMessage() for record in caplog.records if "stop" in record.getMessage().lower()]
    assert said == [f"Stopped by Ctrl-C (SIGINT) at step 3: {last} saved; run the same command to resume"]
    assert noise(caplog.text) == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = train(compose_config(overrides, output_dir=tmp_path))  # in the middle of the second epoch
    assert metrics["resumed_from"] == str(last) and metrics["global_step"] == 4
    assert [str(w.message) for w in caught if "resum" in str(w.message)] == []


def test_a_loader_is_made_without_monai_s_gpu_dicom_decoder_warning(caplog):
    pytest.importorskip("pydicom")  # MONAI makes its DICOM readers only where pydicom is installed
    from segnet.data.image_files import image_loader

    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
        warnings.simplefilter("always")
        ignore_library_warnings()
        image_loader()
    assert [str(w.message) for w in caught if "nvImageCodec" in str(w.message)] == []
    assert [r.getMessage() for r in caplog.records if "nvImageCodec" in r.getMessage()] == []
