"""`tokenrouter simulate` / `sweep`: the run's limits, and the checks that refuse flags a scenario would override."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tokenrouter import options as opt
from tokenrouter.errors import named_as_options
from trcore.errors import ConfigError


def refuse_fixed_concurrency(config: Any, where: Path | None = None) -> None:
    """A ConfigError for ``-N`` where the scenario (at ``where``, named in the message) sets the concurrency: an
    open loop, or phases."""
    named = f"{where}: " if where is not None else ""
    if config.workload.arrival != "closed":
        arrival = config.workload.arrival
        raise ConfigError("--concurrency", f"{named}a {arrival} workload has no concurrency (its rate sets it)")
    if any(p.concurrency is not None for p in config.phases):
        raise ConfigError("--concurrency", f"{named}the scenario's phases set the concurrency; change them there")


def refuse_thresholds_above_concurrency(config: Any) -> None:
    """``--thresholds`` above a closed loop's N, refused as `tokenrouter throughput` refuses them: the policy runs
    such a threshold as N (every request waiting), so the run would be reported under a vector it did not run."""
    if config.workload.arrival != "closed" or any(p.concurrency is not None for p in config.phases):
        return  # the scenario sets the concurrency: a vector may be meant for its larger phases
    n = config.workload.concurrency
    for i, b in enumerate(config.thresholds):
        if b > n:
            raise ConfigError("--thresholds", f"B_{i} = {b} must be within 1..{n} (the concurrency)")
    with named_as_options("thresholds"):  # a vector that can deadlock at N: the one typed
        config.check_feasible()


def check_sweepable(path: Path | None, spec: Any, config: Any, concurrency_given: bool) -> None:
    """A sweep varies TokenRouter's thresholds and the concurrency: a scenario that fixes either is refused."""
    if spec is not None and spec.baseline != "tokenrouter":
        raise ConfigError(
            "--scenario", f"{path}: the {spec.baseline} baseline sets its own thresholds; a sweep varies them"
        )
    if concurrency_given:
        refuse_fixed_concurrency(config, path)


def run_limits(spec: Any, tokens: int | None, warmup_tokens: int | None) -> tuple[int | None, float | None, int]:
    """Run limits: flags win over the scenario's ``run`` section; 100,000 tokens when neither gives one."""
    from trsim.scenario import RunSpec

    run = spec.run if spec is not None else RunSpec()
    warmup = warmup_tokens if warmup_tokens is not None else run.warmup_tokens
    if tokens is not None:
        opt.check_positive(tokens, "--tokens")
        return tokens, None, warmup
    if spec is not None and (spec.phases or spec.diurnal is not None):  # the run ends when the last phase does
        if run.tokens is not None or run.time_s is not None:
            typer.echo("note: the scenario's run: limits give way to its phases (the run ends with the last)", err=True)
        return None, None, warmup
    if run.tokens is None and run.time_s is None:
        return 100_000, None, warmup
    return run.tokens, run.time_s, warmup
