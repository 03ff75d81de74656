"""Where `tokenrouter sweep` and `tokenrouter plan` run their simulator points: local worker processes, or Ray
tasks on a cluster with ``--ray-address`` (Ray is imported only then)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from trcore.errors import ConfigError

if TYPE_CHECKING:
    from trsim.parallel import JobRunner

RAY_ADDRESS_OPTION = typer.Option(
    None, "--ray-address", help="Run the points as Ray tasks on this cluster: 'auto' or the head's host:port."
)


@contextmanager
def job_runner(workers: int | None, ray_address: str | None, workers_option: str) -> Iterator[JobRunner]:
    """``workers`` local processes [CPU count], or the Ray cluster at ``ray_address`` (not both)."""
    if ray_address is None:
        from trsim.parallel import LocalRunner

        if workers is not None and workers < 1:
            raise ConfigError(workers_option, f"must be >= 1, got {workers}")
        yield LocalRunner(workers or os.cpu_count() or 1)
        return
    if workers is not None:
        raise ConfigError(workers_option, "local worker processes and --ray-address exclude each other")
    from trsim.ray_jobs import connect

    with connect(ray_address) as runner:
        yield runner
