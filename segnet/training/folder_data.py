"""DataModule over a Medical Segmentation Decathlon or nnU-Net v2 raw dataset folder.

By default it trains on the preprocessed cache (segnet.preprocessing), built once per job
(Lightning's prepare_data on global rank 0) for every labelled case, so every fold shares it:
crops read by memory map, augmented in the loader's workers or, batched, on the training device
(data.augment_on). data.preprocessed=false loads and preprocesses the sources into memory at
every start instead (MONAI's CacheDataset). Either way the draws (which case, its crops, their
augmentation) are segnet.data.sampling's, per rank. A cascade (data.previous_stage: its 3d_lowres
runs) also reads each case's out-of-fold first-stage label map (segnet.inference.previous_stage),
cached on the plan's grid.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import lightning as L
from monai import transforms as T
from monai.data import CacheDataset, list_data_collate
from torch.utils.data import DataLoader

from segnet.data.cascade_input import previous_values
from segnet.data.cropping import checked_crop
from segnet.data.dataset_json import describe_dataset
from segnet.data.device_augmentation import BatchAugmentation
from segnet.data.regions import foreground_units
from segnet.data.samples import FOREGROUND_SHARE, PREVIOUS
from segnet.data.sampling import DrawLoader, DrawSampler, SeededDraws, fit_position, validation_sampler
from segnet.data.splits import choose_split
from segnet.data.transforms import augmentation_transforms, case_dicts, eval_transforms, train_transforms
from segnet.errors import ConfigError
from segnet.inference.previous_stage import predict_out_of_fold
from segnet.preprocessing.datasets import CropDataset, VolumeDataset
from segnet.preprocessing.maps import DerivedMaps
from segnet.preprocessing.preprocess import preprocess
from segnet.preprocessing.previous_maps import PreviousMaps
from segnet.training.signals import ignore_stop_signals

AUGMENT_ON = ("workers", "device")


class FolderDataModule(L.LightningDataModule):
    def __init__(
        self, root: str, spatial_dims: int = 3, patch_size: Sequence[int] = (96, 96, 96), fold: int | str = 0,
        num_folds: int = 5, split_seed: int = 12345, samples_per_volume: int = 2, batch_size: int = 2,
        cache_rate: float = 1.0, num_workers: int = 2, steps_per_epoch: int | None = 250,
        normalization: Sequence[dict] | None = None, orientation: str = "RAS", spacing: Sequence[float] | None = None,
        preprocessed: bool = True, cache_dir: str | None = None, augment_on: str = "workers",
        affine_augmentation: bool = True, seed: int = 0, maps: Sequence[str] = (),
        previous_stage: Sequence[str] | None = None, foreground_share: float = FOREGROUND_SHARE,
        crop: str | None = None, first_stage_backend: str = "auto",
    ):
        super().__init__()
        self.seed = seed
        self.previous_stage = list(previous_stage or [])  # a cascade's first-stage runs, one per fold
        self.first_stage_backend = first_stage_backend  # the edge op's, as the run's own network
        self.maps = list(maps)  # the label's derived maps the loss reads (segnet.model.loss_terms.required_maps)
        self.description = describe_dataset(str(root))
        self.spatial_dims = spatial_dims
        self.patch_size = list(patch_size)
        self.samples_per_volume = samples_per_volume
        self.batch_size = batch_size
        self.cache_rate = cache_rate
        self.num_workers = num_workers
        if steps_per_epoch is not None and steps_per_epoch < 1:
            raise ConfigError(f"data.steps_per_epoch={steps_per_epoch}; use a positive number of batches, or null")
        self.steps_per_epoch = steps_per_epoch
        if augment_on not in AUGMENT_ON:
            raise ConfigError(f"data.augment_on={augment_on}; use {' or '.join(AUGMENT_ON)} (or auto)")
        if augment_on == "device" and not preprocessed:
            raise ConfigError("data.augment_on=device reads crops from the preprocessed cache; drop "
                              "data.preprocessed=false, or use data.augment_on=workers")
        if self.previous_stage and not preprocessed:
            raise ConfigError("a cascade reads its first stage's label maps from the preprocessed cache: drop "
                              "data.preprocessed=false")
        if self.maps and not preprocessed:
            raise ConfigError(f"the loss reads the label's {' and '.join(self.maps)} maps, which are made into the "
                              "preprocessed cache: drop data.preprocessed=false, or set those terms' weight to 0")
        self.preprocessed, self.cache_dir, self.augment_on = preprocessed, cache_dir, augment_on
        self.affine_augmentation = affine_augmentation
        if not 0 <= foreground_share <= 1:
            raise ConfigError(f"data.foreground_share={foreground_share}; use a share of the crops from 0 to 1")
        self.foreground_share = foreground_share
        self.prepare_data_per_node = False
        self.split = choose_split(self.description, fold, num_folds, split_seed)
        self.train_cases, self.val_cases = self.split.train, self.split.val
        # The dataset's plan (segnet.planning.plan, checked for integrity there, once for all ranks).
        # orientation: axis codes, or a permutation of the stored axes (a run fine-tuned from nnU-Net's model)
        self.geometry = {"normalization": normalization,
                         "orientation": orientation if isinstance(orientation, str) else list(orientation),
                         "spacing": spacing,
                         "crop": checked_crop(crop)}

    def prepare_data(self) -> None:
        # Once per job (global rank 0: the cache is meant for shared storage), before the other
        # ranks set up (Lightning waits for it); a rank that finds a case missing, on storage
        # of its own node, builds it in setup.
        if self.preprocessed:
            self.preprocessed_cases()

    def preprocessed_cases(self) -> dict:
        """The cache entry of every labelled case, built where missing or stale, with the maps the
        loss reads."""
        entries = preprocess(self.description, self.description.labelled, self.geometry, self.cache_dir,
                             self.num_workers)
        self.derived_maps().ensure(list(entries.values()))
        if self.previous_stage:
            self.first_stage.ensure([entries[case.name] for case in self.fold_cases()])
        return entries

    def fold_cases(self) -> list:
        return list(dict.fromkeys((*self.train_cases, *self.val_cases)))

    @functools.cached_property
    def first_stage(self) -> PreviousMaps | None:
        """A cascade's first-stage label maps of this fold's cases, each predicted by the first-stage
        run that validated on it (predicted where it has not been yet); once per process, which
        loads each first-stage model to check its label maps."""
        if not self.previous_stage:
            return None
        sources = predict_out_of_fold(self.previous_stage, self.fold_cases(), self.description.root,
                                      backend=self.first_stage_backend)
        images = {item["name"]: item["image"] for item in case_dicts(self.fold_cases())}
        return PreviousMaps(sources, images, self.geometry)

    def previous_values(self) -> list[int]:
        return previous_values(self.description.num_classes, self.description.regions)

    def derived_maps(self) -> DerivedMaps:
        """The maps the loss reads, of the units it scores (the classes', or the regions')."""
        units = foreground_units(self.description.num_classes, self.description.regions)
        return DerivedMaps(tuple(self.maps), tuple(units), self.spatial_dims)

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "val_set"):
            return
        if self.preprocessed:
            entries = self.preprocessed_cases()  # current already: only checked
            self.train_set = self.crops([entries[c.name] for c in self.train_cases])
            self.val_set = VolumeDataset([entries[c.name] for c in self.val_cases], self.first_stage,
                                         self.previous_values())
            return
        self.train_set = CacheDataset(
            case_dicts(self.train_cases),
            train_transforms(self.patch_size, self.spatial_dims, self.samples_per_volume, self.affine_augmentation,
                             self.description.ignore_label, self.foreground_share, **self.geometry),
            cache_rate=self.cache_rate, num_workers=self.num_workers or None, progress=False,
        )
        self.val_set = CacheDataset(
            case_dicts(self.val_cases), eval_transforms(True, **self.geometry), cache_rate=self.cache_rate,
            num_workers=self.num_workers or None, progress=False,
        )

    def crops(self, entries: list) -> CropDataset:
        """Patches (a 2D patch one slice thick); on the device's turn to augment, with the margin
        its rotations and scalings sample in."""
        patch = list(self.patch_size[:2]) + [1] if self.spatial_dims == 2 else list(self.patch_size)
        margin = [0, 0, 0]
        moved = [*self.maps, *([PREVIOUS] if self.previous_stage else [])]
        augment = T.Compose(augmentation_transforms(self.spatial_dims, self.affine_augmentation, moved))
        if self.augment_on == "device":
            wider = BatchAugmentation.input_size(patch[: self.spatial_dims], self.spatial_dims)
            margin = [(w - p) // 2 for w, p in zip(wider, patch, strict=False)] + [0] * (3 - len(wider))
            augment = None
        regions = self.description.regions
        return CropDataset(entries, patch, self.samples_per_volume, margin, augment,
                           squeeze_last=self.spatial_dims == 2, maps=self.derived_maps() if self.maps else None,
                           regions=regions.values if regions is not None else None, previous=self.first_stage,
                           previous_values=self.previous_values(), foreground_share=self.foreground_share)

    def train_dataloader(self) -> DataLoader:
        # Each draw is a volume that yields samples_per_volume crops, so a batch holds batch_size
        # * that many. With steps_per_epoch, an epoch is that many batches on every rank, volumes
        # drawn with replacement, however few volumes there are (validation every N epochs then
        # means every N * steps); without, one pass over the cases split between the ranks.
        rank, world, batches_taken = fit_position(self)
        per_rank = self.steps_per_epoch * self.batch_size if self.steps_per_epoch is not None else None
        draws = DrawSampler(len(self.train_set), self.batch_size, per_rank, self.seed, rank, world, batches_taken)
        return DrawLoader(SeededDraws(self.train_set), batch_size=self.batch_size, sampler=draws,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
                          worker_init_fn=ignore_stop_signals, collate_fn=list_data_collate)

    def val_dataloader(self) -> DataLoader:
        # Whole volumes of different sizes: one per batch.
        rank, world, _ = fit_position(self)
        return DataLoader(self.val_set, batch_size=1, sampler=validation_sampler(self.val_set, rank, world),
                          num_workers=self.num_workers, worker_init_fn=ignore_stop_signals,
                          collate_fn=list_data_collate)
