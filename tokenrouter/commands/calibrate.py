"""`tokenrouter calibrate`: measure each model of a serve config on its placement, fit latency models, write
profiles (calibration/profiles/<hardware-tag>/<model>.json)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from tokenrouter.errors import cli_errors, named_as_options
from trcore.errors import ConfigError


@cli_errors
def calibrate(
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the local pair."),
    out: Path | None = typer.Option(
        None, "--out", help="Profiles go in OUT/<hardware-tag>/ [calibration/profiles of the checkout]."
    ),
    models: str | None = typer.Option(None, "--models", help="Models to profile, by name (default: all)."),
    batch_sizes: str | None = typer.Option(
        None, "--batch-sizes", help="Decode batch sizes, e.g. '1,2,4' [powers of 2 up to the model's max batch]."
    ),
    contexts: str | None = typer.Option(None, "--contexts", help="Decode context tokens per request [64,256,1024]."),
    extend: str | None = typer.Option(None, "--extend", help="Appended tokens per request, prefill/extend [4,32,256]."),
    repeats: int | None = typer.Option(None, "--repeats", help="Timed repeats per cell [5; --quick 2]."),
    max_cell_tokens: int | None = typer.Option(
        None, "--max-cell-tokens", help="Largest decode cell, batch x context tokens [8192; --quick 1024]."
    ),
    hardware_tag: str | None = typer.Option(None, "--hardware-tag", help="Folder name [cpu-<n>core or the GPU's]."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (a minute or two per model)."),
) -> None:
    """Profile step latency (batch x context), prefill/extend and hand-off cost per model; fit and write profiles."""
    from tokenrouter import options as opt
    from tokenrouter.commands.serve import _load
    from trserve.calibrate.command import CalibrationError, check_request
    from trserve.calibrate.command import calibrate as run
    from trserve.calibrate.plan import grid_from_options
    from trserve.paths import calibration_dir

    chosen = {
        "batch_sizes": _ints(opt, batch_sizes, "--batch-sizes"),
        "contexts": _ints(opt, contexts, "--contexts"),
        "extend": _ints(opt, extend, "--extend"),
        "repeats": repeats,
        "max_cell_tokens": max_cell_tokens,
    }
    with named_as_options(*chosen):
        grid = grid_from_options(quick, **chosen)
    names = [n.strip() for n in models.split(",") if n.strip()] if models is not None else None
    if names == []:
        raise ConfigError("--models", f"names no model, got {models!r} (leave it out to profile every model)")
    cfg = _load(config, None, None)
    command = "tokenrouter calibrate " + shlex.join(_given(locals_=locals()))
    given = [k for k, v in chosen.items() if v is not None]
    with named_as_options(*chosen, "models"):
        check_request(cfg, grid, names, given)
    try:
        with _ProgressView() as view:
            written = run(
                cfg,
                grid,
                out or calibration_dir("profiles"),
                names,
                hardware_tag,
                command.strip(),
                view.on_event,
                given,
            )
    except CalibrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    for model in written:
        typer.echo(summary(model.name, model.path, model.profile))


def _ints(opt: Any, text: str | None, option: str) -> tuple[int, ...] | None:
    return None if text is None else tuple(sorted(set(opt.parse_ints(text, option))))


def _given(locals_: dict[str, Any]) -> list[str]:
    """The options as given, for the profile's ``command`` (how to reproduce it)."""
    flags = {"config": "--config", "models": "--models", "batch_sizes": "--batch-sizes", "contexts": "--contexts",
             "extend": "--extend", "repeats": "--repeats", "max_cell_tokens": "--max-cell-tokens",
             "hardware_tag": "--hardware-tag"}  # fmt: skip
    args = [item for key, flag in flags.items() if locals_[key] is not None for item in (flag, str(locals_[key]))]
    return args + (["--quick"] if locals_["quick"] else [])


class _ProgressView:
    """A rich progress bar per model, fed by the workers' events."""

    def __enter__(self) -> _ProgressView:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.progress = Progress(*columns, transient=False)
        self.progress.__enter__()
        self.tasks: dict[str, Any] = {}
        return self

    def on_event(self, model: str, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "starting":
            self.tasks[model] = self.progress.add_task(f"{model}: starting engine", total=None)
        elif kind == "plan":
            self.progress.update(self.tasks[model], total=event["total"], completed=0)
        elif kind == "step":
            task, description = self.tasks[model], f"{model}: {event['label']}"
            self.progress.update(task, completed=event["done"], total=event["total"], description=description)
        elif kind == "done":
            self.progress.update(self.tasks[model], description=f"{model}: done")

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)  # type: ignore[arg-type]


def summary(name: str, path: Path, profile: Any) -> str:
    """A few lines per model: fits with their MAPE, the spread of repeats, the hand-off ratio."""
    cal = profile.calibration or {}
    lines = [f"{name}: {len(profile.samples)} samples -> {path}"]
    for record in [profile.fit, *profile.other_fits]:
        if record is not None:
            scope = cal.get("fits", {}).get(record.model, {}).get("samples", "?")
            preferred = "  (preferred)" if record is profile.fit else ""
            lines.append(f"  {record.model:<9} MAPE {record.mape:6.1%} on {scope} samples{preferred}")
    spread = cal.get("spread") or {}
    if spread:
        lines.append(
            f"  spread (max-min)/median per cell: median {spread['median_spread']:.1%}, worst "
            f"{spread['max_spread']:.1%}; wall/CPU {spread['median_wall_over_cpu']:.2f}"
        )
    steps = cal.get("steps") or {}
    if steps.get("wall_over_cpu_limit"):
        lines.append(
            f"  waited for a core (wall > {steps['wall_over_cpu_limit']} x CPU): {steps['retried_samples']} samples "
            f"taken again, {steps['kept_contended']} kept after {steps['max_tries']} tries"
        )
    for row in cal.get("handoff", []):
        if "return_ratio_readmit_over_session" in row:
            lines.append(
                f"  hand-off at {row['context']} tokens: return step readmit/session "
                f"{row['return_ratio_readmit_over_session']:.2f}, decode {row['decode_ratio_readmit_over_session']:.2f}"
            )
    return "\n".join(lines)
