"""Where a batch of independent simulator jobs runs: in this process, in local worker processes, or as Ray tasks
on a cluster (``trsim.ray_jobs``, imported only when asked for).

A job is a module-level function and its arguments; each job carries its own seed, so its result does not
depend on where it ran, and :func:`run_jobs` returns results in job order whichever runner finished them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Protocol

Job = tuple[Any, ...]


class JobRunner(Protocol):
    """Runs ``fn(*job)`` for every job and yields ``(job index, result)`` as each finishes."""

    def imap(self, fn: Callable[..., Any], jobs: Sequence[Job]) -> Iterator[tuple[int, Any]]: ...

    def describe(self) -> dict[str, Any]:
        """What ran the jobs, for the output JSON."""
        ...


@dataclass(frozen=True)
class LocalRunner:
    """``workers`` processes on this machine (``fn`` must be picklable); 1 runs the jobs in this process."""

    workers: int = 1

    def imap(self, fn: Callable[..., Any], jobs: Sequence[Job]) -> Iterator[tuple[int, Any]]:
        if self.workers <= 1:
            for k, job in enumerate(jobs):
                yield k, fn(*job)
            return
        with ProcessPoolExecutor(max_workers=self.workers) as pool:
            futures = {pool.submit(fn, *job): k for k, job in enumerate(jobs)}
            for future in as_completed(futures):
                yield futures[future], future.result()

    def describe(self) -> dict[str, Any]:
        return {"backend": "local", "workers": self.workers}


def run_jobs(
    runner: JobRunner,
    fn: Callable[..., Any],
    jobs: Sequence[Job],
    on_done: Callable[[Any], None] | None = None,
) -> list[Any]:
    """``[fn(*job) for job in jobs]`` on ``runner``; ``on_done(result)`` is called as each job finishes."""
    results: list[Any] = [None] * len(jobs)
    for k, result in runner.imap(fn, jobs):
        results[k] = result
        if on_done is not None:
            on_done(result)
    return results
