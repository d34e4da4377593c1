"""Prediction of many cases at the machine's pace, as nnU-Net's predictor runs it: loader worker
processes read and preprocess the next cases while the network runs on this one, and a writer
thread maps the last one back onto its image's grid, labels it and writes it (segnet.inference
.predictor's load, infer and finish: the same steps, in three places at once). The cases come
out in order, exactly as one after another would give them; at most PENDING finished
predictions wait for the writer, so memory does not grow with the number of cases.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from torch.utils.data import DataLoader, Dataset

from segnet.data.dataset_json import Case

PENDING = 2  # cases predicted and waiting for the writer


class Loading(Dataset):
    """Each case loaded by `load` (a PredictionWriter's CaseLoader: every configuration's chain), in a worker."""

    def __init__(self, cases: Sequence[Case], load: Callable[[Case], list[dict]]):
        self.cases, self.load = list(cases), load

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, index: int) -> list[dict]:
        return self.load(self.cases[index])


def as_loaded(item: list[dict]) -> list[dict]:
    return item


def predicted_cases(writer, cases: Sequence[Case], workers: int) -> Iterator:
    """writer.run_case of each case, in order: with `workers` loader processes and a writer thread,
    or, with 0 workers, one step after another in this thread."""
    if workers == 0:
        yield from (writer.run_case(case) for case in cases)
        return
    loader = DataLoader(Loading(cases, writer.load), batch_size=None, num_workers=workers,
                        collate_fn=as_loaded)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="segnet-writer") as writing:
        pending = deque()
        for case, loaded in zip(cases, loader, strict=True):
            pending.append(writing.submit(writer.finish, case, loaded, writer.infer(loaded)))
            while len(pending) > PENDING or (pending and pending[0].done()):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
