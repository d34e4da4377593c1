"""A command that fails leaves no run folder that holds nothing but Hydra's own files.

Hydra makes the run folder (outputs/<task>/<date_time>/ or hydra.run.dir), its .hydra/ and the
log file before the command starts; a command that then stops on a missing argument or a broken
dataset would leave a dated folder with no result in it for every try. A folder that holds
anything else (a plan, a checkpoint, a report) is kept, and so is the working folder itself."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from hydra.core.hydra_config import HydraConfig


@contextlib.contextmanager
def removed_if_failed_unused() -> Iterator[None]:
    """Run the command; where it raises (a one-line error's SystemExit included), remove its run
    folder if nothing but Hydra's files is in it, then let the error go on."""
    try:
        yield
    except BaseException:
        remove_unused_run_folder()
        raise


def remove_unused_run_folder() -> None:
    """This command's Hydra run folder, where it holds only .hydra/ and the log file."""
    if HydraConfig.initialized():
        hydra = HydraConfig.get()
        remove_if_unused(Path(hydra.runtime.output_dir), {hydra.output_subdir, f"{hydra.job.name}.log"} - {None})


def remove_if_unused(folder: Path, hydra_files: set[str]) -> None:
    """`folder` and the parents Hydra made for it below the working folder (outputs/<task>/,
    outputs/) once empty, removed where `folder` holds nothing but `hydra_files`; never the working
    folder or one above it."""
    folder, here = folder.resolve(), Path.cwd().resolve()
    if folder == here or folder in here.parents or not folder.is_dir():
        return
    if any(entry.name not in hydra_files for entry in folder.iterdir()):
        return
    for name in hydra_files:
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for empty in (folder, *folder.parents):
        if empty != folder and here not in empty.parents:
            break
        try:
            empty.rmdir()
        except OSError:  # not empty (another run's folder), or gone already (another rank removed it)
            break
