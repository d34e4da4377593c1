"""Fine-tuning a model nnU-Net trained (model.init_from=<its fold folder>, segnet.training.nnunet_fine_tuning):
its network trained in segnet on its own grid and intensity scale, with edge layers at alpha 0,
a checkpoint segnet-predict reads back, and the refusals of any fine-tuning."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from helpers.training import FIT_PROBE, TINY_TRAINER, FitProbe, compose_config
from ops import EdgeEnhance
from segnet.errors import ConfigError
from segnet.inference.predict import predict_command
from segnet.training.fine_tuning import initialize_from
from segnet.training.run_config import run_config
from segnet.training.train import build_module, train


def tuning(nnunet_model, output_dir, *overrides: str, root=None):
    """A run on the nnU-Net model's own dataset (or `root`), fine-tuned from its fold 0."""
    return compose_config(["data=folder", f"data.root={root or nnunet_model.base / 'raw' / 'Dataset901_Tiny'}",
                           "data.num_folds=3", "data.num_workers=0", "op=python", "logger=csv",
                           f"model.init_from={nnunet_model.folder / 'fold_0'}", *TINY_TRAINER, *overrides],
                          output_dir=output_dir)


def test_the_first_forward_pass_is_the_source_network_s_with_edges_at_alpha_zero(nnunet_model, tmp_path):
    from segnet.inference.nnunet_model import load_nnunet

    cfg = run_config(tuning(nnunet_model, tmp_path / "run")).config
    # loaded as nnU-Net loaded it: its stored axes' order, spacing, crop and patch
    assert (list(cfg.data.orientation), list(cfg.data.spacing), cfg.data.crop) == ([1, 2, 0], [2.0, 1.0, 1.0],
                                                                                   "nonzero")
    assert list(cfg.data.patch_size) == [28, 24, 18] and cfg.model.network == "nnunet"
    module = build_module(cfg, "python")
    initialize_from(module.net, cfg.model.init_from, module.class_names, module.regions)
    layers = [m for m in module.net.modules() if isinstance(m, EdgeEnhance)]
    assert len(layers) == 1 + len(module.net.network.encoder.stages)
    assert all(layer.alpha.requires_grad and not layer.alpha.any() for layer in layers)
    source = load_nnunet(nnunet_model.checkpoint, torch.device("cpu")).net
    image = torch.randn(2, 1, 28, 24, 18, generator=torch.Generator().manual_seed(0)) * 3
    with torch.no_grad():
        expected = source.eval()(image)
        torch.testing.assert_close(module.eval()(image), expected, rtol=0, atol=1e-5)
        module.train()
        # nnU-Net's deep supervision but for its coarsest output, which its trainer weights 0
        levels = module(image)
    assert isinstance(levels, torch.Tensor) and levels.shape == expected.shape
    assert len(module.net.supervision_heads) == 0  # three stages: two outputs, the coarsest left out


def test_a_fine_tuned_run_trains_nnunet_s_network_and_segnet_predict_reads_its_checkpoint(nnunet_model, tmp_path):
    metrics = train(tuning(nnunet_model, tmp_path / "run", "data.steps_per_epoch=3", FIT_PROBE))
    assert metrics["global_step"] == 3 and metrics["val_dice_mean"] > 0.8  # it started where nnU-Net left it
    saved = torch.load(metrics["checkpoints"]["last"], weights_only=True)
    assert saved["hyper_parameters"]["model"]["network"] == "nnunet"
    # (nnU-Net's decoder holds the encoder too: each stage's alpha is there twice)
    alphas = [value for name, value in saved["state_dict"].items() if name.endswith("alpha")
              and "decoder.encoder" not in name]
    assert len(alphas) == 4 and all(alpha.abs().sum() > 0 for alpha in alphas)  # the edge layers trained
    started = FitProbe.made[-1].start_state
    assert all(not started[name].any() for name in started if name.endswith("alpha"))
    predict_command(compose_config([f"ckpt_path={metrics['checkpoints']['last']}",
                                    f"input={nnunet_model.test_images}", f"output={tmp_path / 'out'}", "tta=false",
                                    "num_workers=0", "device=cpu"], name="predict"))
    for case in ("test0", "test1"):
        ours = np.asarray(nib.load(tmp_path / "out" / f"{case}.nii.gz").dataobj)
        reference = np.asarray(nib.load(nnunet_model.predictions / f"{case}.nii.gz").dataobj)
        assert (ours == reference).mean() >= 0.97, case  # three steps from nnU-Net's weights


def test_other_channels_or_normalization_are_refused_as_from_a_segnet_run(nnunet_model, tmp_path):
    root = tmp_path / "Dataset902_Other"
    shutil.copytree(nnunet_model.base / "raw" / "Dataset901_Tiny", root)
    spec = json.loads((root / "dataset.json").read_text())
    (root / "dataset.json").write_text(json.dumps({**spec, "channel_names": {"0": "CT"}}))
    with pytest.raises(ConfigError, match=r"channels \['CT'\] in .*dataset.json but \['MRI'\] in model.init_from="):
        run_config(tuning(nnunet_model, tmp_path / "a", root=root))
    with pytest.raises(ConfigError, match=r"normalized its channels as \['zscore'\] but this run normalizes them as "
                                          r"\['ct'\]"):
        run_config(tuning(nnunet_model, tmp_path / "b", "init_allow=[channels]", root=root))
    allowed = run_config(tuning(nnunet_model, tmp_path / "c", "init_allow=[channels,normalization]",
                                root=root)).config
    assert OmegaConf.to_container(allowed.data.normalization)[0]["scheme"] == "ct"
    assert list(allowed.data.spacing) == [2.0, 1.0, 1.0]  # the grid is the source's all the same


def test_a_model_folder_of_several_folds_asks_for_one(nnunet_model, tmp_path):
    from segnet.nnunet.source import nnunet_checkpoint

    folder = tmp_path / nnunet_model.folder.name
    shutil.copytree(nnunet_model.folder, folder)
    assert nnunet_checkpoint(folder) == folder / "fold_0" / "checkpoint_final.pth"
    shutil.copytree(folder / "fold_0", folder / "fold_1")
    with pytest.raises(ConfigError, match=r"has the folds fold_0, fold_1: fine-tuning starts from one, name it"):
        nnunet_checkpoint(folder)


def test_segnet_evaluate_scores_a_fold_of_an_nnunet_model_on_its_validation_cases(nnunet_model, tmp_path):
    from segnet.evaluation.evaluate import evaluate_command

    summary = evaluate_command(compose_config([f"data.root={nnunet_model.base / 'raw' / 'Dataset901_Tiny'}",
                                               f"ckpt_path={nnunet_model.checkpoint}", "device=cpu", "op=python",
                                               "tta=false"], output_dir=tmp_path / "eval", name="evaluate"))
    splits = json.loads((nnunet_model.base / "preprocessed" / "Dataset901_Tiny" / "splits_final.json").read_text())
    scored = sorted(Path(case["prediction_file"]).name.removesuffix(".nii.gz") for case in summary["metric_per_case"])
    assert scored == sorted(splits[0]["val"])  # nnU-Net's fold 0 validation cases
    assert summary["foreground_mean"]["Dice"] > 0.8
