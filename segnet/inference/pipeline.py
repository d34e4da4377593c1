"""Prediction of many cases at the machine's pace, as nnU-Net's predictor runs it: loader worker
processes read and preprocess the next cases while the network runs on this one, and a writer
thread maps the last one back onto its image's grid, labels it and writes it (segnet.inference
.predictor's load, infer and finish: the same steps, in three places at once). The cases come
out in order, exactly as one after another would give them; at most PENDING finished
predictions wait for the writer, so memory does not grow with the number of cases.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from torch.utils.data import DataLoader, Dataset

from segnet.data.dataset_json import Case

PENDING = 2  # cases predicted and waiting for the writer
# Forked workers: MONAI's Invertd checks that the transforms a loaded image records are the very
# objects inverting it, which holds for a fork's copies (and is relaxed for spawn), not under
# forkserver (Python 3.14's default on Linux).
CONTEXT = "fork" if "fork" in multiprocessing.get_all_start_methods() else None


class Loading(Dataset):
    """Each case loaded by `load` (a PredictionWriter's CaseLoader: every configuration's chain), in a worker."""

    def __init__(self, cases: Sequence[Case], load: Callable[[Case], list[dict]]):
        self.cases, self.load = list(cases), load

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, index: int) -> list[dict] | Exception:
        try:
            return self.load(self.cases[index])
        except Exception as error:  # raised in the main process as itself (a DatasetError's one line)
            return error


def as_loaded(item: list[dict] | Exception) -> list[dict] | Exception:
    return item


def predicted_cases(writer, cases: Sequence[Case], workers: int) -> Iterator:
    """writer.run_case of each case, in order: with `workers` loader processes and a writer thread,
    or, with 0 workers, one step after another in this thread."""
    if workers == 0:
        yield from (writer.run_case(case) for case in cases)
        return
    loader = DataLoader(Loading(cases, writer.load), batch_size=None, num_workers=workers,
                        collate_fn=as_loaded, multiprocessing_context=CONTEXT)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="segnet-writer") as writing:
        pending = deque()
        for case, loaded in zip(cases, loader, strict=True):
            if isinstance(loaded, Exception):
                raise loaded
            pending.append(writing.submit(writer.finish, case, loaded, writer.infer(loaded)))
            while len(pending) > PENDING or (pending and pending[0].done()):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
