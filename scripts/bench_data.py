"""Memory and speed of training's data: the preprocessed cache against loading every case into memory.

Measured on generated brain-MRI-sized cases, as one table for the README.

    python scripts/bench_data.py [--cases 4,16,64] [--quick] [--work DIR] [--out DIR]

Cases (blob_head): 192 x 224 x 192 voxels at 1 mm in RAS, one MRI channel (float32, gzip NIfTI,
zero outside an ellipsoidal head), labels 1-3: smooth random blobs, made in seconds. They have a
brain MRI's size but not segnet.generated.brain's anatomy, which is drawn on a grid 4 times finer
in every axis (64 times the voxels). They are generated once into --work (default:
segnet-bench-data in the system's temporary folder) and reused; generating is not measured. Each
case count gets a dataset folder of links to the first N cases and a cache folder of its own,
--work/cache-<shape>/<N>, emptied at every run (a full run keeps about 0.7 GB of cases and
3.5 GB of caches there). --quick: 2 and 4 cases of 48^3, crops of 32^3 and 48 x 48.

The DataModule is FolderDataModule as training builds it for these cases: 3D, patch
128^3, RAS, spacing 1 mm (the cases' own: resampling is a no-op), normalization null (z-score
over the head), 2 volumes x 2 crops per batch, fold 0 of min(5, N) folds, data.cache_dir in
--work. Every setup runs in a process of its own (`in_fresh_process`). Files read come from the
OS page cache where they were read or written shortly before.

One table, printed as Markdown and written to --out/bench_data.csv, sorted by its first four
columns: measurement, path, setting, cases (the dataset's case count; "4-64" for a slope
between the smallest and the largest count), value, unit. Paths: "CacheDataset" is
data.preprocessed=false (MONAI's CacheDataset: every case loaded and kept in memory), "preprocessed
cache" data.preprocessed=true (the cache of segnet.preprocessing, crops read from memory maps).
Measurements:

- setup time (s), setup RSS added (MiB): prepare_data() + setup("fit") of the main process with
  data.num_workers=0, wall time and the change of its VmRSS. "CacheDataset": it loads with
  os.cpu_count() threads; "preprocessed cache: cold": the cache folder empty, so this builds it (in
  one thread, max(1, num_workers)); "preprocessed cache: warm": the same again in a new process,
  cache present.
- ... per added case (s/case, MiB/case): the slope of the above between the smallest and the
  largest case count (the part that grows with the dataset).
- worker RSS, worker private memory (MiB): the one DataLoader worker's VmRSS, and the part of it
  no other process maps (Private_Clean + Private_Dirty of /proc/self/smaps_rollup), read by the
  worker itself, the most over the batches, while it makes 3D crops with the MONAI augmentation
  after the setup above. RSS counts the pages it has shared with the main process since the
  fork (the imported libraries; for "CacheDataset" the cases in memory too); private memory is
  what the worker holds alone: pages copied on write from the main process (Python's reference
  counts and garbage collector write to every object they visit), its own allocations and, while
  a crop is read, the pages of the cache it maps.
- crop rate (samples/s), crop CPU per sample (s): crops made one after another in one process
  with torch.set_num_threads(1); CPU time is time.process_time(). "CacheDataset: train_transforms":
  a CacheDataset of one case, the chain that path runs per volume (copy of the cached volume,
  foreground-aware crops, augmentation); "preprocessed cache: workers (MONAI)": CropDataset over
  the cases of the smallest count with the same augmentation (data.augment_on=workers);
  "preprocessed cache: device, crop only": CropDataset reading the crop with the margin
  BatchAugmentation needs, unaugmented (data.augment_on=device). 2D crops are the cases' in-plane
  size, which is the 2D plan's patch unless its memory budget shrinks it.
- batch augmentation time, CPU (s/batch): BatchAugmentation on the CPU, one thread, on a batch
  of 2 such crops (the reading not counted): what augment_on=device leaves to the device.
- cache on disk per case (MiB/case): the files of the cache folder of the largest count, per case;
  the setting is the folder, under --work.
- fingerprint time (s): the fingerprint and integrity check a run's planning asks for
  (segnet.planning.record), in a fresh interpreter: "cold record" reads every case (a dataset
  without its record), "warm record" finds the record of an unchanged dataset and only checks its
  sources' stamps.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from monai.data import CacheDataset
from torch.utils.data import Dataset

from segnet.data.dataset_json import describe_dataset
from segnet.data.derived import cache_root
from segnet.data.device_augmentation import BatchAugmentation
from segnet.data.transforms import case_dicts, train_transforms
from segnet.generated.phantom import affine_for, write_case, write_dataset_json
from segnet.planning.record import dataset_fingerprint
from segnet.preprocessing.cache import cache_folder, loading_plan
from segnet.training.folder_data import FolderDataModule

CLASS_NAMES = ("background", "structure_1", "structure_2", "structure_3")
# loading as a plan of MRI heads loads: cropped to the body box (segnet.data.cropping) before normalizing
GEOMETRY = {"orientation": "RAS", "spacing": [1.0, 1.0, 1.0], "normalization": None, "crop": "body"}
BLOB_VOXELS = 16  # the random values' grid step before smoothing: blobs of about this size
CACHE_DATASET, PREPROCESSED = "CacheDataset", "preprocessed cache"  # data.preprocessed=false, true
COLD_CACHE, WARM_CACHE = f"{PREPROCESSED}: cold", f"{PREPROCESSED}: warm"
COLD_RECORD, WARM_RECORD = "cold record", "warm record"
# the measurements that get a slope per added case
PER_CASE = ("setup time", "setup RSS added", "worker RSS", "worker private memory", "fingerprint time")


@dataclass(frozen=True)
class Preset:
    shape: tuple[int, int, int]
    cases: str
    patch_3d: tuple[int, int, int]
    patch_2d: tuple[int, int]
    min_samples: int  # crops (batches) timed per row, at least ...
    min_seconds: float  # ... and for at least this long
    worker_batches: int


FULL = Preset((192, 224, 192), "4,16,64", (128, 128, 128), (192, 224), 8, 5.0, 4)
QUICK = Preset((48, 48, 48), "2,4", (32, 32, 32), (48, 48), 2, 0.2, 2)


@dataclass(frozen=True)
class Row:
    measurement: str
    path: str
    setting: str
    cases: str
    value: float
    unit: str


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def proc_mib(names: Sequence[str], file: str) -> float:
    """The sum of these kB fields of /proc/self/<file>, in MiB."""
    lines = (line.partition(":") for line in Path(f"/proc/self/{file}").read_text().splitlines())
    return sum(int(rest.split()[0]) for name, _, rest in lines if name in names) / 1024


def rss_mib() -> float:
    """This process's resident memory: VmRSS, MiB."""
    return proc_mib(["VmRSS"], "status")


def private_mib() -> float:
    """This process's resident memory that no other process maps, MiB."""
    return proc_mib(["Private_Clean", "Private_Dirty"], "smaps_rollup")


def shape_tag(shape: Sequence[int]) -> str:
    return "x".join(str(s) for s in shape)


# Generated cases


def smooth_noise(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Standard normal values on a grid BLOB_VOXELS apart, trilinearly interpolated: smooth blobs."""
    coarse = rng.standard_normal([max(2, s // BLOB_VOXELS) for s in shape]).astype(np.float32)
    fine = F.interpolate(torch.from_numpy(coarse)[None, None], size=list(shape), mode="trilinear", align_corners=True)
    return fine[0, 0].numpy()


def blob_head(shape: Sequence[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(image float32, label uint8): a head of textured tissue, zero outside, holding three
    structures of smooth random blobs."""
    rng = np.random.default_rng(seed)
    axes = np.ogrid[tuple(slice(0, s) for s in shape)]
    head = sum(((a - (s - 1) / 2) / (0.45 * s)) ** 2 for a, s in zip(axes, shape, strict=True)) < 1
    label = np.zeros(shape, np.uint8)
    for value, threshold in ((1, 0.8), (2, 1.2), (3, 1.6)):  # larger to smaller structures
        label[head & (smooth_noise(shape, rng) > threshold)] = value
    contrast = np.array([0, 40, 80, -50], np.float32)[label]
    image = 300 + 30 * smooth_noise(shape, rng) + contrast + 10 * rng.standard_normal(shape, dtype=np.float32)
    return np.where(head, image, 0).astype(np.float32), label


def ensure_cases(pool: Path, shape: Sequence[int], count: int) -> list[str]:
    """The names of `count` cases in pool/imagesTr and labelsTr, generating those not there. A case
    is written in a scratch folder and moved in, its image last: one whose image is there is whole."""
    names = [f"brain_{i:03d}" for i in range(count)]
    for seed, name in enumerate(names):
        if (pool / "imagesTr" / f"{name}.nii.gz").is_file():
            continue
        say(f"generating {name} ({shape_tag(shape)} voxels) in {pool}")
        scratch = pool / ".partial"
        image, label = blob_head(shape, seed)
        write_case(scratch, name, [image], label, affine_for((1.0, 1.0, 1.0), "RAS", shape))
        for folder in ("labelsTr", "imagesTr"):
            (pool / folder).mkdir(parents=True, exist_ok=True)
            os.replace(scratch / folder / f"{name}.nii.gz", pool / folder / f"{name}.nii.gz")
    return names


def dataset_for(root: Path, pool: Path, names: Sequence[str]) -> Path:
    """A Decathlon folder at `root` of links to these cases of the pool."""
    for name, folder in itertools.product(names, ("imagesTr", "labelsTr")):
        link = root / folder / f"{name}.nii.gz"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(pool / folder / f"{name}.nii.gz")
    return write_dataset_json(root, "decathlon", CLASS_NAMES, ["MRI"], names, name=root.name)


# Measurements, each run in a process of its own


# What the forkserver imports before it forks a measurement's process: the libraries that take
# seconds to import, so that each process does not pay them again.
PRELOADED = ["torch", "monai", "segnet.training.folder_data", "segnet.planning.record"]


def in_fresh_process(function: Callable, *args):
    """function(*args) in a new process, so that no measurement sees another's memory: a fork of
    multiprocessing's forkserver, an interpreter that has imported PRELOADED and measured nothing."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


def data_module(root: Path, count: int, cache_dir: Path, patch: Sequence[int], preprocessed: bool = True,
                augment_on: str = "workers") -> FolderDataModule:
    return FolderDataModule(
        str(root), spatial_dims=len(patch), patch_size=list(patch), num_folds=min(5, count), samples_per_volume=2,
        batch_size=2, num_workers=0, preprocessed=preprocessed, cache_dir=str(cache_dir), augment_on=augment_on,
        **GEOMETRY,
    )


def timed_setup(module: FolderDataModule) -> dict[str, float]:
    """Wall seconds and VmRSS added (MiB) by prepare_data() + setup("fit")."""
    before, start = rss_mib(), time.perf_counter()
    module.prepare_data()
    module.setup("fit")
    return {"seconds": time.perf_counter() - start, "rss_added": rss_mib() - before}


class WithWorkerMemory(Dataset):
    """The crops of a dataset, each carrying the resident and private memory (MiB) of the process
    that made it."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> list[dict]:
        crops = self.dataset[index]
        memory = {"worker_rss": torch.tensor(rss_mib()), "worker_private": torch.tensor(private_mib())}
        return [{**crop, **memory} for crop in crops]


def worker_memory(module: FolderDataModule, batches: int) -> dict[str, float]:
    """The most resident and private memory (MiB) of the one DataLoader worker over `batches`
    training batches."""
    module.num_workers, module.steps_per_epoch = 1, batches
    module.train_set = WithWorkerMemory(module.train_set)
    most = {"worker_rss": 0.0, "worker_private": 0.0}
    for batch in module.train_dataloader():
        most = {key: max(value, float(batch[key].max())) for key, value in most.items()}
    return most


def measure_setup(root: Path, count: int, cache_dir: Path, preprocessed: bool, patch: Sequence[int],
                  batches: int) -> dict[str, float]:
    """timed_setup of a fresh DataModule, then (batches > 0) its worker's memory."""
    module = data_module(root, count, cache_dir, patch, preprocessed)
    result = timed_setup(module)
    if batches:
        result.update(worker_memory(module, batches))
    return result


def measure_fingerprint(root: Path, cache_dir: Path) -> dict[str, float]:
    """Wall seconds of the dataset's fingerprint and integrity check, as a run's planning asks for it."""
    start = time.perf_counter()
    dataset_fingerprint(describe_dataset(str(root)), str(cache_dir))
    return {"seconds": time.perf_counter() - start}


def time_samples(produce: Callable[[], int], min_samples: int, min_seconds: float) -> tuple[float, float]:
    """(samples per second, CPU seconds per sample) of calling `produce` (which returns how many
    samples it made) after one warm-up call, until both minimums are reached."""
    produce()
    made, start, cpu = 0, time.perf_counter(), time.process_time()
    while made < min_samples or time.perf_counter() - start < min_seconds:
        made += produce()
    return made / (time.perf_counter() - start), (time.process_time() - cpu) / made


def crop_rows(dataset: Dataset, path: str, setting: str, preset: Preset) -> list[Row]:
    """Rate and CPU per crop of a dataset whose items are lists of crops, cycling over its cases."""
    indices = itertools.cycle(range(len(dataset)))
    rate, cpu = time_samples(lambda: len(dataset[next(indices)]), preset.min_samples, preset.min_seconds)
    return [Row("crop rate", path, setting, "", rate, "samples/s"),
            Row("crop CPU per sample", path, setting, "", cpu, "s")]


def cache_dataset_chain(module: FolderDataModule) -> CacheDataset:
    """data.preprocessed=false's training dataset over the first case alone: in memory,
    train_transforms per item."""
    chain = train_transforms(module.patch_size, module.spatial_dims, module.samples_per_volume, **module.geometry)
    return CacheDataset(case_dicts(module.description.labelled[:1]), chain, num_workers=1, progress=False)


def batch_augmentation_rows(module: FolderDataModule, crops: Dataset, setting: str, preset: Preset) -> list[Row]:
    """Seconds and CPU seconds of BatchAugmentation per batch of the crops of one item of `crops`."""
    batch = crops[0]
    image, label = torch.stack([c["image"] for c in batch]), torch.stack([c["label"] for c in batch])
    augmentation = BatchAugmentation(module.spatial_dims, module.patch_size[: module.spatial_dims])
    generator = torch.Generator().manual_seed(0)

    def one_batch() -> int:
        augmentation(image, label, generator)
        return 1

    rate, cpu = time_samples(one_batch, preset.min_samples, preset.min_seconds)
    path = f"{PREPROCESSED}: device, BatchAugmentation"
    return [Row("batch augmentation time", path, f"{setting}, batch of {len(batch)}", "", 1 / rate, "s/batch"),
            Row("batch augmentation CPU", path, f"{setting}, batch of {len(batch)}", "", cpu, "s/batch")]


def time_crops(root: Path, count: int, cache_dir: Path, preset: Preset) -> list[Row]:
    """Every crop and batch augmentation row, 3D and 2D, on one thread, from a warm cache."""
    torch.set_num_threads(1)
    rows = []
    for patch in (preset.patch_3d, preset.patch_2d):
        setting = f"{len(patch)}D {shape_tag(patch)}"
        workers = data_module(root, count, cache_dir, patch, augment_on="workers")
        device = data_module(root, count, cache_dir, patch, augment_on="device")
        entries = list(workers.preprocessed_cases().values())
        wider = shape_tag(BatchAugmentation.input_size(patch, len(patch)))
        rows += crop_rows(cache_dataset_chain(workers), f"{CACHE_DATASET}: train_transforms", setting, preset)
        rows += crop_rows(workers.crops(entries), f"{PREPROCESSED}: workers (MONAI)", setting, preset)
        rows += crop_rows(device.crops(entries), f"{PREPROCESSED}: device, crop only", f"{setting} (read {wider})",
                          preset)
        rows += batch_augmentation_rows(device, device.crops(entries), setting, preset)
    return rows


# The table


def setup_rows(results: dict[tuple[str, int], dict[str, float]], patch: Sequence[int], batches: int) -> list[Row]:
    settings = {CACHE_DATASET: f"loaded in {os.cpu_count()} threads", COLD_CACHE: "built in 1 thread",
                WARM_CACHE: "checked",
                COLD_RECORD: "every case read", WARM_RECORD: "the sources' stamps checked"}
    worker = f"3D {shape_tag(patch)}, MONAI augmentation, {batches} batches of 4 crops"
    rows = []
    for (path, count), result in results.items():
        if path in (COLD_RECORD, WARM_RECORD):
            rows.append(Row("fingerprint time", path, settings[path], str(count), result["seconds"], "s"))
            continue
        rows += [Row("setup time", path, settings[path], str(count), result["seconds"], "s"),
                 Row("setup RSS added", path, settings[path], str(count), result["rss_added"], "MiB")]
        if "worker_rss" in result:
            rows += [Row("worker RSS", path, worker, str(count), result["worker_rss"], "MiB"),
                     Row("worker private memory", path, worker, str(count), result["worker_private"], "MiB")]
    return rows


def per_case_rows(rows: Sequence[Row]) -> list[Row]:
    """The slope of each PER_CASE measurement between its smallest and largest case count."""
    slopes = []
    for measurement, path, setting in sorted({(r.measurement, r.path, r.setting) for r in rows
                                              if r.measurement in PER_CASE}):
        values = {int(r.cases): r for r in rows if (r.measurement, r.path, r.setting) == (measurement, path, setting)}
        low, high = min(values), max(values)
        if low < high:
            slope = (values[high].value - values[low].value) / (high - low)
            slopes.append(Row(f"{measurement} per added case", path, setting, f"{low}-{high}", slope,
                              f"{values[high].unit}/case"))
    return slopes


def cache_disk_row(work: Path, root: Path, cache_dir: Path, count: int) -> Row:
    """MiB per case of the cache folder of this dataset."""
    folder = cache_folder(cache_root(str(cache_dir)), root, loading_plan(**GEOMETRY))
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return Row("cache on disk per case", PREPROCESSED, str(folder.relative_to(work)), str(count),
               size / count / 2**20, "MiB/case")


def sort_key(row: Row) -> tuple:
    natural = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", row.cases)]
    return row.measurement, row.path, row.setting, natural


def number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def markdown(rows: Sequence[Row]) -> str:
    names = [f.name for f in fields(Row)]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for row in rows:
        cells = [number(v) if isinstance(v, float) else v for v in asdict(row).values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(rows: Sequence[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, [f.name for f in fields(Row)])
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def parse_cases(text: str) -> list[int]:
    counts = sorted({int(part) for part in text.split(",")})
    if counts[0] < 2:
        raise SystemExit(f"--cases {text}: every count must be at least 2 (a training and a validation case)")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="case counts, comma-separated (default 4,16,64; --quick: 2,4)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: cases of 48^3, 3D crops of 32^3")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "segnet-bench-data",
                        help="where the cases and caches go (reused)")
    parser.add_argument("--out", type=Path, help="write bench_data.csv here")
    args = parser.parse_args()
    preset = QUICK if args.quick else FULL
    counts = parse_cases(args.cases or preset.cases)
    work, tag = args.work.resolve(), shape_tag(preset.shape)
    names = ensure_cases(work / f"cases-{tag}", preset.shape, counts[-1])
    roots = {n: dataset_for(work / f"datasets-{tag}" / f"Brain{n:03d}", work / f"cases-{tag}", names[:n])
             for n in counts}
    caches = {n: work / f"cache-{tag}" / f"{n:03d}" for n in counts}
    results = {}
    for n in counts:
        shutil.rmtree(caches[n], ignore_errors=True)
        for path, preprocessed, batches in ((CACHE_DATASET, False, preset.worker_batches), (COLD_CACHE, True, 0),
                                            (WARM_CACHE, True, preset.worker_batches)):
            say(f"setup: {path}, {n} cases")
            results[path, n] = in_fresh_process(measure_setup, roots[n], n, caches[n], preprocessed,
                                                preset.patch_3d, batches)
        for path in (COLD_RECORD, WARM_RECORD):
            say(f"fingerprint: {path}, {n} cases")
            results[path, n] = in_fresh_process(measure_fingerprint, roots[n], caches[n])
    say("crops")
    rows = setup_rows(results, preset.patch_3d, preset.worker_batches)
    rows += per_case_rows(rows)
    rows += in_fresh_process(time_crops, roots[counts[0]], counts[0], caches[counts[0]], preset)
    rows.append(cache_disk_row(work, roots[counts[-1]], caches[counts[-1]], counts[-1]))
    rows.sort(key=sort_key)
    print(f"\n{', '.join(map(str, counts))} cases of {tag} voxels at 1 mm (one float32 MRI channel, gzip NIfTI); "
          f"{os.cpu_count()} CPUs; work folder {work}\n")
    print(markdown(rows))
    if args.out:
        write_csv(rows, args.out / "bench_data.csv")


if __name__ == "__main__":
    main()
