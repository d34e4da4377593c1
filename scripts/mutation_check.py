"""A mutation check of our own: do the tests of a feature fail when that feature breaks?

    python scripts/mutation_check.py                      # every mutant (10-20 minutes on 2 cores)
    python scripts/mutation_check.py --list               # the mutants, what each breaks, their tests
    python scripts/mutation_check.py --only splits-seed normalization-clip
    python scripts/mutation_check.py --baseline           # the same tests, unmutated: they must pass
    python scripts/mutation_check.py --keep               # keep the copy and each pytest log

Each mutant in MUTANTS (below) is one text replacement in one tracked file: `old` must occur
exactly once in that file. The tracked files (`git ls-files`) are copied once into a temporary
folder; for each mutant the replacement is applied there, only that mutant's tests are run
there, and the file is put back:

    python -m pytest TESTS -x -q -p no:cacheprovider --basetemp=...   (cwd = the copy)

with PYTHONPATH=<copy>:<copy>/tests, so the copy's modules are imported and not the editable
install's /work/main (checked once, before the first mutant: the check stops if `import segnet`
or `import ops` resolves outside the copy). A mutant of csrc/ runs with SEGNET_OPS_CACHE set to
a folder of its own, so the compiled op is rebuilt from the mutated sources. The other mutants
share one op cache of the run, which builds the op once per run and is removed afterwards (kept
with --keep); the user's default cache is never touched, though it would serve the copy, since
builds are cached by their sources' content (ops/library.py).

Results:
- killed: pytest exited with failures (1), or was interrupted (2, e.g. the mutated module does
  not import): the tests caught the broken feature;
- SURVIVED: the tests passed with the feature broken; they do not check it;
- not applied: `old` is not in the file exactly once; the code moved on and the mutant must be
  updated with it;
- timeout: the tests ran past the mutant's timeout (a hang or a slow machine: raise `timeout`);
- error: pytest could not run the selection (bad arguments, 4) or selected no test (5).
The script exits 0 only when every mutant run was killed (with --baseline: every selection
passed), 1 otherwise, 2 when the copy does not import its own modules.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str  # the feature, as the table says it
    path: str  # relative to the checkout
    old: str  # occurs exactly once in path
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, -k, -m
    timeout: int = 300  # seconds for the whole pytest run


MUTANTS: tuple[Mutant, ...] = (
    Mutant("normalization-clip", "CT normalization ignores the percentile clip",
           "segnet/data/normalization.py",
           'clipped = image.clamp(entry["percentile_00_5"], entry["percentile_99_5"])',
           "clipped = image",
           ("tests/data/test_normalization.py", "-k", "ct_is_clipped or ct_values")),
    Mutant("integrity-classes", "integrity check accepts label values above the classes",
           "segnet/planning/integrity.py",
           "allowed = (values >= 0) & (values < len(class_names)) | (values == ignore_label)",
           "allowed = (values >= 0) | (values == ignore_label)",
           ("tests/training/test_train.py", "-k", "broken_dataset")),
    Mutant("integrity-fractional", "integrity check accepts non-integer label values (interpolated labels)",
           "segnet/planning/integrity.py",
           "bad = values[(values != np.round(values)) | ~allowed]",
           "bad = values[~allowed]",
           ("tests/training/test_train.py", "-k", "broken_dataset")),
    Mutant("headers-max-voxels-flipped", "header check: max_voxels comparison flipped",
           "segnet/data/headers.py",
           "if voxels > max_voxels:",
           "if voxels < max_voxels:",
           ("tests/data/test_headers.py", "-k", "each_lie")),
    Mutant("headers-max-voxels-removed", "header check: max_voxels not checked",
           "segnet/data/headers.py",
           "if voxels > max_voxels:",
           "if False:",
           ("tests/data/test_headers.py", "-k", "each_lie or integrity_check")),
    Mutant("headers-zero-spacing", "header check accepts a zero voxel spacing",
           "segnet/data/headers.py",
           "(spacing > 0).all()",
           "(spacing >= 0).all()",
           ("tests/data/test_headers.py", "-k", "each_lie")),
    Mutant("ignore-loss-dice", "ignore label: the Dice term of the loss sees ignored voxels",
           "segnet/model/dice_ce.py",
           "dice = self.masked_dice(logits, label * known, mask=known)",
           "dice = self.masked_dice(logits, label * known, mask=torch.ones_like(known))",
           ("tests/data/test_ignore_label.py", "-k", "loss_sees_only_known")),
    Mutant("ignore-metrics-prediction", "ignore label: a prediction on ignored voxels scored as a false positive",
           "segnet/metrics.py",
           "return prediction * known, reference * known, int(known.sum())",
           "return prediction, reference * known, int(known.sum())",
           ("tests/data/test_ignore_label.py", "-k", "metrics_leave_ignored")),
    Mutant("ignore-metrics-tn", "ignore label: ignored voxels counted as true negatives",
           "segnet/metrics.py",
           "return prediction * known, reference * known, int(known.sum())",
           "return prediction * known, reference * known, reference.size",
           ("tests/data/test_ignore_label.py", "-k", "metrics_leave_ignored")),
    Mutant("ensemble-first-only", "ensembling sums only the first model (divided by the model count)",
           "segnet/inference/predictor.py",
           "for model in self.models:",
           "for model in self.models[:1]:",
           ("tests/inference/test_prediction.py", "-k", "new_images_come_back"), timeout=480),
    Mutant("ensemble-first-model", "ensembling returns the first model's probabilities alone",
           "segnet/inference/predictor.py",
           "            total = p if total is None else total + p\n        return total / len(self.models)",
           "            total = p if total is None else total\n        return total",
           ("tests/inference/test_prediction.py", "-k", "new_images_come_back"), timeout=480),
    Mutant("resampling-dropped", "resampling: Spacingd dropped from the loading chain",
           "segnet/data/transforms.py",
           "if spacing is not None:  # a spacing of 0",
           "if False:  # a spacing of 0",
           ("tests/data/test_resampling.py",)),
    Mutant("orientation-ignored", "orientation: Orientationd ignores the plan's axcodes (always RAS)",
           "segnet/data/transforms.py",
           "T.Orientationd(keys=keys, axcodes=orientation, labels=None)",
           'T.Orientationd(keys=keys, axcodes="RAS", labels=None)',
           ("tests/data/test_resampling.py",)),
    Mutant("splits-unsorted", "splits: folds over the names as given, not sorted",
           "segnet/data/splits.py",
           "ordered = sorted(names)",
           "ordered = list(names)",
           ("tests/data/test_splits.py", "-k", "not run_records")),
    Mutant("splits-seed", "splits: shuffled with another seed than data.split_seed",
           "segnet/data/splits.py",
           "np.random.RandomState(seed).shuffle(indices)",
           "np.random.RandomState(seed + 1).shuffle(indices)",
           ("tests/data/test_splits.py", "-k", "not run_records")),
    Mutant("cache-stale-sources", "preprocessed cache: is_current ignores the sources' stamps",
           "segnet/preprocessing/cache.py",
           'return case_unchanged(case, self.properties()["sources"])',
           'return "sources" in self.properties()',
           ("tests/preprocessing/test_preprocessing.py", "-k", "changed_plan_or_case")),
    Mutant("cache-plan-ignored", "preprocessed cache: one folder whatever the loading plan",
           "segnet/preprocessing/cache.py",
           "return dataset_folder(root, dataset_root) / digest(plan)",
           'return dataset_folder(root, dataset_root) / "plan"',
           ("tests/preprocessing/test_preprocessing.py", "-k", "changed_plan_or_case")),
    Mutant("cache-code-ignored", "preprocessed cache: its key leaves out the code that made it",
           "segnet/preprocessing/cache.py",
           '            "code": code_version(LOADING_CODE, LOADING_LIBRARIES)}',
           "            }",
           ("tests/preprocessing/test_preprocessing.py", "-k", "new_loading_code")),
    Mutant("stamps-size-and-time", "source stamps: a file is unchanged while its size and modification time are",
           "segnet/data/derived.py",
           "    same = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino) == (\n"
           '        stamp["size"], stamp["mtime_ns"], stamp["ctime_ns"], stamp["inode"])',
           '    same = (stat.st_size, stat.st_mtime_ns) == (stamp["size"], stamp["mtime_ns"])',
           ("tests/preprocessing/test_preprocessing.py", "-k", "behind_its_size")),
    Mutant("stamps-no-content", "source stamps: a file changed within its clock's tick is not hashed",
           "segnet/data/derived.py",
           '    return same and ("sha256" not in stamp or file_digest(stamp["path"]) == stamp["sha256"])',
           "    return same",
           ("tests/preprocessing/test_preprocessing.py", "-k", "clock_tick")),
    Mutant("record-stamps-ignored", "fingerprint record: a case whose files changed is not read again",
           "segnet/planning/record.py",
           'if c.name not in recorded or not case_unchanged(c, recorded[c.name]["sources"])]',
           "if c.name not in recorded]",
           ("tests/planning/test_fingerprint_record.py", "-k", "changed_case")),
    Mutant("record-unlocked", "fingerprint record: processes starting together each read the dataset",
           "segnet/planning/record.py",
           'with exclusive(folder / ".lock"):',
           'with open(folder / ".lock", "a"):',
           ("tests/planning/test_fingerprint_record.py", "-k", "starting_together")),
    Mutant("ignore-crop-centres", "ignore label: cached foreground voxels include the ignored ones",
           "segnet/preprocessing/cache.py",
           "if value == 0 or value == ignore_label:",
           "if value == 0:",
           ("tests/data/test_ignore_label.py", "-k", "centred")),
    Mutant("gzip-trailer-trusted", "header check: a gzip trailer trusted past 4 GiB (the size wrapped)",
           "segnet/data/headers.py",
           "if needed >= 2**32 or end == BGZF_END:",
           "if end == BGZF_END:",
           ("tests/data/test_headers.py", "-k", "4_gib")),
    Mutant("draws-rank-alike", "training draws: every rank draws the same seeds",
           "segnet/data/sampling.py",
           "seeds = np.random.default_rng([self.seed, self.rank, epoch, 1])",
           "seeds = np.random.default_rng([self.seed, epoch, 1])",
           ("tests/data/test_sampling.py", "-k", "every_rank")),
    Mutant("draws-restart", "training draws: every iterator starts the stream again (a resume replays it)",
           "segnet/data/sampling.py",
           "epoch, batch = divmod(self.batches_taken(), max(1, batches))",
           "epoch, batch = 0, 0",
           ("tests/data/test_sampling.py", "-k", "goes_on")),
    Mutant("worker-augment-unseeded", "training draws: the workers' augmentation keeps its own random state",
           "segnet/preprocessing/datasets.py",
           '            self.augment.set_random_state(seed=int(self.R.randint(MAX_SEED, dtype="uint32")))',
           "            pass",
           ("tests/data/test_sampling.py", "-k", "seed_alone")),
    Mutant("device-augment-global-seed", "training draws: the device augmentation seeded from torch's generator",
           "segnet/training/module.py",
           'generator = torch.Generator(self.device).manual_seed(int(batch["seed"][0]))',
           "generator = torch.Generator(self.device).manual_seed(int(torch.randint(2**62, ())))",
           ("tests/training/test_resume.py", "-k", "draws_on and device")),
    Mutant("atomic-path-in-place", "atomic writes: atomic_path writes the target in place",
           "segnet/files.py",
           "    temporary = _temporary_beside(path)\n    try:\n        yield temporary\n"
           "        os.replace(temporary, path)\n    finally:\n        temporary.unlink(missing_ok=True)",
           "    yield path",
           ("tests/training/test_resume.py", "-k", "failed_write")),
    Mutant("atomic-checkpoint-in-place", "atomic writes: checkpoints written in place",
           "segnet/checkpoints/writing.py",
           "            with open(temporary, \"wb\") as f:\n                torch.save(checkpoint, f)\n"
           "                f.flush()\n                os.fsync(f.fileno())\n            os.replace(temporary, path)",
           "            with open(path, \"wb\") as f:\n                torch.save(checkpoint, f)",
           ("tests/training/test_resume.py", "-k", "failed_write")),
    Mutant("best-checkpoint-min", "best checkpoint: keeps the lowest validation Dice (mode min)",
           "conf/callbacks/default.yaml",
           "  mode: max\n",
           "  mode: min\n",
           ("tests/training/test_resume.py", "-k", "best_the_best")),
    Mutant("early-stopping-min", "early stopping: watches for a falling validation Dice (mode min)",
           "conf/callbacks/early_stopping.yaml",
           "  mode: max\n",
           "  mode: min\n",
           ("tests/training/test_schedule.py", "-k", "early_stopping")),
    Mutant("resume-ignored", "resume: ckpt_path not passed to trainer.fit (a restart)",
           "segnet/training/train.py",
           "trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)",
           "trainer.fit(module, datamodule=datamodule, ckpt_path=None, weights_only=True)",
           ("tests/training/test_resume.py", "-k", "resumed_run"), timeout=480),
    Mutant("final-validation-unnamed", "final validation: no checkpoint named (Lightning takes SLURM's hpc one)",
           "segnet/training/final_weights.py",
           "scores = trainer.validate(module, datamodule=datamodule, ckpt_path=final_weights, verbose=False,",
           "scores = trainer.validate(module, datamodule=datamodule, ckpt_path=None, verbose=False,",
           ("tests/training/test_resume.py", "-k", "slurm")),
    Mutant("resume-any-configuration", "resume: a checkpoint of another configuration resumed",
           "segnet/training/resume.py",
           "    found = differences(saved, hparams)\n    if found:",
           "    found = differences(saved, hparams)\n    if not found:",
           ("tests/training/test_resume.py", "-k", "same_run")),
    Mutant("cluster-every-process-first", "one planner per job: is_first_process always True",
           "segnet/cluster.py",
           'return (rank_zero_only.rank or 0) == 0 and int(os.environ.get("NODE_RANK", "0")) == 0',
           "return True",
           ("tests/training/test_cluster.py", "-k", "rank_zero_is_read")),
    Mutant("augmentation-rotation", "device augmentation: rotation range pi/10 instead of pi/12",
           "segnet/data/device_augmentation.py",
           "ROTATE_RANGE = math.pi / 12",
           "ROTATE_RANGE = math.pi / 10",
           ("tests/data/test_device_augmentation.py", "-k", "distributed_as_the_worker_chain")),
    Mutant("augmentation-flip", "device augmentation: flip probability 0.4 instead of 0.5",
           "segnet/data/device_augmentation.py",
           '"flip": rand(dims) < probs["flip"]',
           '"flip": rand(dims) < 0.4',
           ("tests/data/test_device_augmentation.py", "-k", "distributed_as_the_worker_chain")),
    Mutant("export-drops-edge-op", "export agreement: the exported graph loses the skip's edge op",
           "segnet/export/exporter.py",
           "net, device = model.net, model.device",
           'net, device = __import__("copy").deepcopy(model.net), model.device\n'
           "    net.skip_edges[0] = torch.nn.Identity()",
           ("tests/export/test_deployment.py", "-k", "equals_eager and exported_program"), timeout=480),
    Mutant("export-stride", "export agreement: exported for twice the network's stride (sizes 2 mod 4 refused)",
           "segnet/export/exporter.py",
           "stride = list(net.downsampling)  # per axis",
           "stride = [2 * s for s in net.downsampling]",
           ("tests/export/test_deployment.py", "-k", "equals_eager and exported_program"), timeout=480),
    Mutant("export-metadata-stride", "export agreement: model.json gives half the input stride",
           "segnet/export/exporter.py",
           '"multiple_of": stride,',
           '"multiple_of": [max(s // 2, 1) for s in stride],',
           ("tests/export/test_deployment.py", "-k", "(equals_eager and exported_program) or predict_from_the_package"),
           timeout=600),
    Mutant("schedule-no-warmup", "schedule: warm-up skipped (one step whatever optim.warmup_steps)",
           "segnet/training/optimizers.py",
           'warmup = min(optim["warmup_steps"], max(total // 10, 1))',
           "warmup = 1",
           ("tests/training/test_schedule.py",)),
    Mutant("op-reference-sobel-tap", "op math: one Sobel derivative tap's sign flipped (python reference)",
           "ops/reference.py",
           "DERIV = (-1.0, 0.0, 1.0)",
           "DERIV = (1.0, 0.0, 1.0)",
           ("tests/ops/test_op_reference.py",)),
    Mutant("op-cpp-forward-sign", "op math: compiled forward subtracts the edge term (csrc, rebuilt)",
           "csrc/edge_stencil.h",
           "return identity_term(residual, x) + alpha * m;",
           "return identity_term(residual, x) - alpha * m;",
           ("tests/ops/test_op_cpp.py", "-k", "matches_reference_in_float64"), timeout=600),
    Mutant("op-magnitude-keeps-x", "op's magnitude form: the compiled forward adds x back (csrc, rebuilt)",
           "csrc/cpu/edge_enhance.cpp",
           "return forward_cpu(ForwardCall::magnitude(x, eps), eps, false);",
           "return forward_cpu(ForwardCall::magnitude(x, eps), eps, true);",
           ("tests/ops/test_edge_magnitude.py", "-k", "cpp_matches_reference"), timeout=600),
    Mutant("op-magnitude-march-keeps-grad", "op's magnitude form: the CUDA march adds grad_m to grad_x (csrc, rebuilt)",
           "csrc/march/backward.h",
           "pending[i] = identity_term(residual, gy[i]) + p_before[i]",
           "pending[i] = gy[i] + p_before[i]",
           ("tests/ops/test_edge_magnitude.py", "-k", "emulated_cuda_march_matches"), timeout=600),
    Mutant("edge-loss-band-in-voxels", "loss.edge: the band's width in voxels whatever the spacing",
           "segnet/model/edge_loss.py",
           "return [max(0, round(band_mm / float(s))) for s in spacing]",
           "return [max(0, round(band_mm)) for s in spacing]",
           ("tests/model/test_loss_terms.py", "-k", "band or by_hand")),
    Mutant("edge-loss-ignored-rim-kept", "loss.edge: the edge of an ignored region counted as a class's",
           "segnet/model/edge_loss.py",
           "known = ~dilate(ignored, [1] * (classes.dim() - 1))",
           "known = ~ignored",
           ("tests/model/test_loss_terms.py", "-k", "ignored_region")),
    Mutant("loss-ramp-ignored", "loss.ramp_steps: the added terms at full weight from the first step",
           "segnet/model/loss_terms.py",
           "return 1.0 if self.ramp_steps <= 0 else min(1.0, step / self.ramp_steps)",
           "return 1.0",
           ("tests/model/test_loss_terms.py", "-k", "ramped")),
    Mutant("maps-distance-unsigned", "derived maps: the distance inside a class counted positive",
           "segnet/preprocessing/maps.py",
           "return (outside - inside).astype(np.float32)",
           "return (outside + inside).astype(np.float32)",
           ("tests/preprocessing/test_maps.py", "-k", "signed_distances")),
    Mutant("maps-kept-past-a-rebuild", "derived maps: a rebuilt case keeps the maps of its old label",
           "segnet/preprocessing/cache.py",
           "path.unlink(missing_ok=True)",
           "pass",
           ("tests/preprocessing/test_maps.py", "-k", "dropped or other_code")),
    Mutant("maps-not-keyed-by-their-code", "derived maps: one folder whatever code made them, so stale maps are read",
           "segnet/preprocessing/cache.py",
           'f"maps-{maps_key()}"',
           '"maps"',
           ("tests/preprocessing/test_maps.py", "-k", "other_code")),
    Mutant("maps-not-flipped-on-device", "device augmentation: the label flipped but not its maps",
           "segnet/data/device_augmentation.py",
           'moved = {name: flip(value, p["flip"]) for name, value in moved.items()}',
           "moved = dict(moved)",
           ("tests/preprocessing/test_maps.py", "-k", "device_augmentation")),
    Mutant("maps-not-flipped-in-workers", "worker augmentation: the label flipped but not its maps",
           "segnet/data/transforms.py",
           "steps += [T.RandFlipd(keys=moved, prob=0.5, spatial_axis=axis) for axis in range(spatial_dims)]",
           "steps += [T.RandFlipd(keys=list(KEYS), prob=0.5, spatial_axis=axis) for axis in range(spatial_dims)]",
           ("tests/preprocessing/test_maps.py", "-k", "worker_augmentation")),
    Mutant("crops-without-their-spacing", "crops: 1 mm voxels whatever the plan's spacing (the edge band's)",
           "segnet/preprocessing/datasets.py",
           'spacing = torch.tensor(entry.properties()["spacing"], dtype=torch.float64)',
           "spacing = torch.ones(3, dtype=torch.float64)",
           ("tests/preprocessing/test_maps.py", "-k", "carry")),
    Mutant("boundary-loss-unsigned", "loss.boundary: distances without their sign",
           "segnet/model/map_losses.py",
           "weighted = foreground_softmax(logits) * distance",
           "weighted = foreground_softmax(logits) * distance.abs()",
           ("tests/model/test_loss_terms.py", "-k", "boundary_loss_by_hand")),
    Mutant("skeleton-recall-as-precision", "loss.skeleton_recall: divided by the prediction, not the skeleton",
           "segnet/model/map_losses.py",
           "recall = ((probabilities * tubes).sum(axes) + SMOOTH) / (tubes.sum(axes) + SMOOTH)",
           "recall = ((probabilities * tubes).sum(axes) + SMOOTH) / (probabilities.sum(axes) + SMOOTH)",
           ("tests/model/test_loss_terms.py", "-k", "skeleton_recall_by_hand")),
    Mutant("sgd-poly-no-nesterov", "optim=sgd_poly: plain momentum instead of nnU-Net's Nesterov",
           "segnet/training/optimizers.py",
           "nesterov=True,",
           "nesterov=False,",
           ("tests/training/test_schedule.py", "-k", "sgd")),
    Mutant("sgd-poly-exponent", "optim=sgd_poly: a linear decay whatever optim.exponent",
           "segnet/training/optimizers.py",
           'power=optim["exponent"]',
           "power=1.0",
           ("tests/training/test_schedule.py", "-k", "sgd")),
    Mutant("fine-tuning-ignored", "model.init_from: the run starts from its own initialization",
           "segnet/training/train.py",
           "        initialize_from(module.net, cfg.model.init_from, module.class_names)",
           "        pass",
           ("tests/training/test_fine_tuning.py", "-k", "new_schedule")),
    Mutant("fine-tuning-rows-by-position", "model.init_from: the heads' rows taken in the checkpoint's order, "
           "not by class name",
           "segnet/training/fine_tuning.py",
           "return {row: list(source).index(name) for row, name in enumerate(target) if name in source}",
           "return {row: row for row, name in enumerate(target) if name in source and row < len(source)}",
           ("tests/training/test_fine_tuning.py", "-k", "by_class_name")),
    Mutant("postprocessing-not-applied", "postprocessing: label maps written without the run's rules",
           "segnet/inference/predictor.py",
           "label_map = self.rules.apply(unprocessed)",
           "label_map = unprocessed",
           ("tests/postprocessing/test_postprocessing.py", "-k", "applies")),
    Mutant("postprocessing-ties-taken", "postprocessing: a class rule kept when it does not raise the Dice",
           "segnet/postprocessing/decide.py",
           "if after[c - 1] > before[c - 1]",
           "if after[c - 1] >= before[c - 1]",
           ("tests/postprocessing/test_postprocessing.py", "-k", "raises_the_mean")),
    Mutant("layers-upward-import", "layers: inference imports the training code again",
           "segnet/inference/loading.py",
           "from segnet.inference.trained_model import TrainedModel\n",
           "from segnet.inference.trained_model import TrainedModel\n"
           "from segnet.training import module as _training  # noqa\n",
           ("tests/test_layers.py", "-k", "point_down")),
    Mutant("layers-upward-import-at-run-time", "layers: data loads the training code at import, unseen by the "
                                               "source's import statements",
           "segnet/data/__init__.py",
           'the files derived from a dataset."""\n',
           'the files derived from a dataset."""\n__import__("importlib").import_module("segnet.training.module")\n',
           ("tests/test_layers.py", "-k", "imports_alone")),
    Mutant("checkpoint-network-prefix", "loading: a checkpoint's network weights looked up under another name",
           "segnet/checkpoints/reading.py",
           'NET = "net."',
           'NET = "model."',
           ("tests/inference/test_checkpoint_loading.py", "-k", "autocast")),
    Mutant("checks-grad-y-wording", "op errors: the python check of grad_y's dtype worded unlike the C++ one",
           "ops/checks.py",
           'raise ValueError(f"{op}: {name} must have the dtype of x ({x.dtype}), got {grad.dtype}")',
           'raise ValueError(f"{op}: {name} has the wrong dtype {grad.dtype}")',
           ("tests/ops/test_op_cpp.py", "-k", "grad_y")),
    Mutant("docs-make-target", "docs: a make target the README shows renamed",
           "Makefile",
           "test-fast: $(STAMP)",
           "test-quick: $(STAMP)",
           ("tests/test_docs.py", "-k", "make")),
    Mutant("supervision-weights-equal", "deep supervision: every level weighted alike",
           "segnet/model/dice_ce.py",
           "halves = [0.5**level for level in range(levels)]",
           "halves = [1.0 for level in range(levels)]",
           ("tests/model/test_deep_supervision.py",)),
    Mutant("supervision-coarsest-kept", "deep supervision: the level next to the bottleneck supervised too",
           "segnet/model/network.py",
           "supervised = range(1, len(strides) - 1) if deep_supervision else range(0)",
           "supervised = range(1, len(strides)) if deep_supervision else range(0)",
           ("tests/model/test_deep_supervision.py",)),
    Mutant("supervision-in-eval", "deep supervision: eval mode returns every level (prediction, export)",
           "segnet/model/network.py",
           "supervise = self.training and len(self.supervision_heads) > 0",
           "supervise = len(self.supervision_heads) > 0",
           ("tests/model/test_deep_supervision.py",)),
    Mutant("topology-anisotropy", "network sizing: coarse axes pooled whatever their spacing",
           "segnet/planning/network_shape.py",
           "axes = [a for a in axes if spacing[a] / finest < 2]",
           "axes = [a for a in axes if spacing[a] / finest < 99]",
           ("tests/planning/test_network_sizing.py", "-k", "nnunets")),
    Mutant("sizing-ignores-proposal", "network sizing: a sized model trains the fixed network's patch and batch",
           "segnet/planning/plan.py",
           "chosen = proposal or configuration",
           "chosen = configuration",
           ("tests/planning/test_network_sizing.py", "-k", "values_set_win")),
    Mutant("encoder-blocks-dropped", "resenc: the extra encoder units left out of the forward pass",
           "segnet/model/network.py",
           "h = more(down(h))",
           "h = down(h)",
           ("tests/model/test_network.py", "-k", "encoder_units")),
    Mutant("cpu-plan-no-compute-budget", "device plan: a CPU plan fits memory alone",
           "segnet/planning/planner.py",
           "    if budget.step_gflops is not None:\n        flops",
           "    if False:\n        flops",
           ("tests/planning/test_device_plan.py", "-k", "fits_a_steps_flops")),
    Mutant("plan-device-ignores-trainer", "device plan: training plans for a visible GPU whatever its trainer",
           "segnet/planning/plan.py",
           'if cfg.get("trainer") is not None:',
           'if False:',
           ("tests/planning/test_device_plan.py", "-k", "trainers")),
    Mutant("brain-no-partial-volume", "brain-like task: tissues drawn at the voxels' own size, no partial volume",
           "segnet/generated/brain.py",
           "SUPERSAMPLE = 4",
           "SUPERSAMPLE = 1",
           ("tests/generated/test_brain_dataset.py", "-k", "partial_volume")),
    Mutant("accuracy-check-ignores-seed-spread", "accuracy check: a difference within retraining's spread called worse",
           "scripts/accuracy_check.py",
           "abs(row[\"mean_difference\"]) <= spread",
           "False",
           ("tests/scripts/test_accuracy_check.py", "-k", "seed_spread")),
    Mutant("validation-postprocessing-unapplied", "final validation: the postprocessed Dice is the Dice as predicted",
           "segnet/training/postprocessing_trials.py",
           "{trial: trials[trial] for trial in TRIALS[1:]}",
           "{trial: trials[\"none\"] for trial in TRIALS[1:]}",
           ("tests/training/test_final_validation.py", "-k", "each_rule")),
    Mutant("topology-cavities-ignored", "Betti numbers: a 3D cavity counted as a tunnel",
           "segnet/topology_metrics.py",
           "return b0, b0 + _enclosed_background(mask) - int(chi)",
           "return b0, b0 - int(chi)",
           ("tests/evaluation/test_topology.py", "-k", "3d_shapes")),
    Mutant("topology-foreground-by-faces", "Betti numbers: diagonal neighbours counted as separate components",
           "segnet/topology_metrics.py",
           "_, b0 = ndimage.label(mask, structure=ndimage.generate_binary_structure(mask.ndim, mask.ndim))",
           "_, b0 = ndimage.label(mask, structure=ndimage.generate_binary_structure(mask.ndim, 1))",
           ("tests/evaluation/test_topology.py", "-k", "2d_shapes")),
    Mutant("ablation-postprocessing-unpaired", "recipe ablation: the postprocessing rules left out of the report",
           "segnet/evaluation/ablation.py",
           'if sweep.kind == "recipe" and variant == sweep.baseline:',
           "if False:",
           ("tests/evaluation/test_ablation_report.py", "-k", "postprocessing")),
    Mutant("ops-cache-by-folder", "op cache: a build is named by its sources' folder, so a clone compiles again",
           "ops/library.py",
           "digest = hashlib.sha256()",
           "digest = hashlib.sha256(str(root).encode())",
           ("tests/ops/test_op_build.py", "-k", "found_by_content"), timeout=600),
    Mutant("ops-stamp-before-build", "op cache: the finished-build stamp written before the build, so a killed "
                                     "build is taken for a finished one",
           "ops/library.py",
           "            if _finished(build_dir, library):  # ninja's",
           "            (build_dir / BUILT_STAMP).touch()\n"
           "            if _finished(build_dir, library):  # ninja's",
           ("tests/ops/test_op_build.py", "-k", "killed_mid_compile"), timeout=600),
    Mutant("wheel-pure", "wheel: the compiled op shipped in a pure-Python (any platform) wheel",
           "setup.py",
           "        return builds_ops()",
           "        return False",
           ("tests/export/test_deployment.py", "-k", "wheel_runs_the_op_and_predicts"), timeout=900),
    Mutant("command-imports-its-work", "start-up: segnet-predict imports its work (torch, MONAI) before Hydra",
           "segnet/commands.py",
           "from segnet.errors import user_errors_as_one_line\n",
           "from segnet.errors import user_errors_as_one_line\n"
           "from segnet.inference.predict import predict  # noqa: F401\n",
           ("tests/test_commands.py", "-k", "segnet-predict")),
    Mutant("command-check-skipped", "start-up: a command's mistakes answered only after its work imported "
           "Lightning and MONAI",
           "segnet/commands.py",
           "            if check is not None:\n                imported(check)(cfg)\n",
           "",
           ("tests/test_commands.py", "-k", "common_mistake")),
    Mutant("statistics-absent-dropped", "paired statistics: a class absent and not predicted left out, so a false "
           "positive never counts",
           "segnet/evaluation/statistics.py",
           "    return ABSENT_SCORE[metric]\n",
           "    return math.nan\n",
           ("tests/evaluation/test_statistics.py", "-k", "absent or predicted_where")),
    Mutant("final-validation-not-competing", "best.ckpt: the final weights never compete, so an older, worse "
           "best.ckpt stays",
           "segnet/training/final_weights.py",
           "        compete_for_best(trainer, best, scores.get(best.monitor), last_path)",
           "        pass",
           ("tests/training/test_resume.py", "-k", "best_of_every")),
    Mutant("run-config-edits-composed", "training: the run's decisions written into Hydra's composed configuration",
           "segnet/training/run_config.py",
           "cfg = copy.deepcopy(composed)",
           "cfg = composed",
           ("tests/planning/test_planning.py", "-k", "takes_back_its_plan")),
    Mutant("run-config-unresolved", "config.yaml: the run's configuration written with its interpolations",
           "segnet/training/run_config.py",
           "OmegaConf.to_yaml(cfg, resolve=True)",
           "OmegaConf.to_yaml(cfg)",
           ("tests/planning/test_planning.py", "-k", "takes_back_its_plan")),
    Mutant("data-keys-unchecked", "data section: a key that nothing reads is dropped without a word",
           "segnet/training/train.py",
           "    check_data_keys(composed.data)\n",
           "",
           ("tests/training/test_config.py", "-k", "nothing_reads")),
    Mutant("tta-single-flips", "test-time augmentation: one flip per axis instead of nnU-Net's every combination",
           "segnet/inference/windows.py",
           "for flipped in itertools.combinations(axes, n)]",
           "for flipped in itertools.combinations(axes, n) if n < 2]",
           ("tests/inference/test_windows.py",)),
    Mutant("postprocessing-never-optimistic", "summary.json: rules chosen on the evaluated cases not marked optimistic",
           "segnet/inference/component_rules.py",
           "optimistic, why = True,",
           "optimistic, why = False,",
           ("tests/postprocessing/test_postprocessing.py", "-k", "decides")),
    Mutant("continue-any-model", "segnet-predict continue=true: a label map of another model counts as done",
           "segnet/inference/predictor.py",
           "return asked and path.is_file() and header_description(path) == self.stamp",
           "return asked and path.is_file()",
           ("tests/inference/test_prediction.py", "-k", "never_mixes")),
    Mutant("step-wall-without-loading", "StepTimer: the end-to-end step time leaves out the wait for data, so the "
           "peer budget favours segnet",
           "segnet/training/callbacks.py",
           "(end - self._last_end) * 1e3 if self._last_end is not None else None",
           "(end - self._start) * 1e3 if self._last_end is not None else None",
           ("tests/training/test_step_timer.py",)),
    Mutant("workers-die-at-a-stop", "stops: DataLoader workers die of a group SIGTERM, so the run crashes unsaved",
           "segnet/training/signals.py",
           "        signal.signal(signum, signal.SIG_IGN)",
           "        pass",
           ("tests/training/test_resume.py", "-k", "process_group and 15")),
    Mutant("validation-skipped-on-resume", "resume: a validation cut short by a stop is skipped by the resumed run",
           "segnet/training/resume_state.py",
           '            validation_from_the_start(checkpoint["loops"]["fit_loop"])',
           "            pass",
           ("tests/training/test_resume.py", "-k", "validates_at_the_steps")),
)

RESULT_OK = {"killed"}


def checkout_root() -> Path:
    return Path(__file__).resolve().parents[1]


def copy_tracked(root: Path, target: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = root / name
        if not source.is_file():  # deleted in the work tree but not in the index
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)


def environment(copy: Path, ops_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": f"{copy}{os.pathsep}{copy / 'tests'}",
        "SEGNET_OPS_CACHE": str(ops_cache),
        "PYTHONDONTWRITEBYTECODE": "1",  # no .pyc of a mutant can outlive it
    })
    return env


def check_imports(copy: Path, env: dict[str, str]) -> None:
    """Fails loudly unless the copy's own packages are the ones imported there."""
    probe = "import segnet, ops, helpers; print(segnet.__file__); print(ops.__file__); print(helpers.__file__)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=env, capture_output=True, text=True)
    files = done.stdout.split()
    outside = [f for f in files if not Path(f).resolve().is_relative_to(copy.resolve())]
    if done.returncode != 0 or len(files) != 3 or outside:
        sys.exit(f"mutation_check: the copy {copy} does not import its own modules ({outside or done.stderr[-2000:]}); "
                 "every mutant would test the checkout instead")


def run_pytest(copy: Path, tests: tuple[str, ...], env: dict[str, str], basetemp: Path, timeout: int,
               log: Path) -> tuple[int | None, str]:
    """pytest's exit status (None: timed out; its process group is killed) and its output."""
    basetemp.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}"]
    with subprocess.Popen(command, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            code = None
    log.write_text(output)
    return code, output


def first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return match.group(1).split("::")[-1] if match else ""


def classify(code: int | None, baseline: bool) -> str:
    if code is None:
        return "timeout"
    if code in (4, 5):
        return "error"
    if baseline:
        return "passed" if code == 0 else "FAILED"
    return "SURVIVED" if code == 0 else "killed"


def applies(root: Path, m: Mutant) -> bool:
    file = root / m.path
    return file.is_file() and file.read_text().count(m.old) == 1


@contextlib.contextmanager
def mutated(file: Path, old: str, new: str):
    """The file with `old` (there exactly once) replaced by `new`; put back, with its modification
    time, afterwards."""
    text = file.read_text()
    stat = file.stat()
    file.write_text(text.replace(old, new))
    try:
        yield
    finally:
        file.write_text(text)
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def print_table(rows: list[dict[str, str]]) -> None:
    columns = ("mutant", "breaks", "tests", "result", "by", "seconds")
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-+-".join("-" * widths[c] for c in columns))
    for row in rows:
        print(" | ".join(row[c].ljust(widths[c]) for c in columns))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy and the pytest logs")
    parser.add_argument("--baseline", action="store_true",
                        help="run each selected mutant's tests on the unmutated copy (they must pass)")
    args = parser.parse_args()

    known = {m.name for m in MUTANTS}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; --list shows them")
    selected = [m for m in MUTANTS if not args.only or m.name in args.only]
    root = checkout_root()
    if args.list:
        for m in selected:
            state = "" if applies(root, m) else " [NOT APPLIED: its old text is not in the file exactly once]"
            print(f"{m.name}: {m.breaks}{state}\n    {m.path}\n"
                  f"    pytest {shlex.join(m.tests)} (timeout {m.timeout} s)")
        return 0

    work = Path(tempfile.mkdtemp(prefix="segnet-mutation-"))
    copy = work / "tree"
    started = time.perf_counter()
    rows = []
    try:
        copy_tracked(root, copy)
        shared_cache = work / "ops-cache"
        check_imports(copy, environment(copy, shared_cache))
        print(f"mutation_check: {len(selected)} mutant(s) in {copy}{' (baseline: unmutated)' if args.baseline else ''}",
              flush=True)
        for m in selected:
            cache = work / f"ops-cache-{m.name}" if m.path.startswith("csrc/") and not args.baseline else shared_cache
            row = {"mutant": m.name, "breaks": m.breaks, "tests": shlex.join(m.tests), "by": "", "seconds": ""}
            begin = time.perf_counter()
            with contextlib.ExitStack() as stack:
                if not applies(copy, m):
                    row["result"] = "not applied"
                else:
                    if not args.baseline:
                        stack.enter_context(mutated(copy / m.path, m.old, m.new))
                    code, output = run_pytest(copy, m.tests, environment(copy, cache), work / "pytest" / m.name,
                                              m.timeout, work / f"{m.name}.log")
                    row["result"] = classify(code, args.baseline)
                    row["by"] = first_failure(output)
            row["seconds"] = f"{time.perf_counter() - begin:.0f}"
            rows.append(row)
            print(f"  {m.name}: {row['result']} {row['by']} ({row['seconds']} s)", flush=True)
    finally:
        if args.keep:
            print(f"mutation_check: kept {work} (tree/, <mutant>.log)")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print_table(rows)
    good = {"passed"} if args.baseline else RESULT_OK
    bad = [r["mutant"] for r in rows if r["result"] not in good]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} {'passed' if args.baseline else 'killed'} in "
          f"{time.perf_counter() - started:.0f} s" + (f"; not {'passed' if args.baseline else 'killed'}: "
                                                     f"{', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
