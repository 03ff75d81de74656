"""Re-diagnosing a written cross-validation run: add the rescaled predictions to its ``crossval.json`` (from its
own traces and profiles) and rewrite its JSON, markdown and figure. ``python -m trserve.crossval.rediagnose DIR``.
:func:`read_run` reads a written run's simulator inputs back (``trserve.crossval.repredict`` re-simulates from them).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from trcore.errors import ConfigError
from trcore.routing_stats import estimate_routing_stats
from trcore.traces import RequestTrace
from trserve.config import ServeConfig
from trserve.crossval.diagnose import add_rescaled_predictions
from trserve.crossval.predict import Calibration, emulated_calibration, kv_for_sim, load_calibration
from trserve.crossval.run import write_outputs
from trserve.crossval.scoring import max_batch_of
from trserve.crossval.stack import stack_from_doc
from trsim.tracefile import read_traces


def read_run(folder: Path) -> tuple[dict[str, Any], ServeConfig, Calibration, dict[str, list[RequestTrace]]]:
    """A written run's document, config, calibration (its profiles, the stack costs and KV pools it simulated
    with; no drift factors) and replayed traces per router."""
    if not (folder / "crossval.json").is_file():
        raise ConfigError("DIR", f"{folder} holds no crossval.json")
    doc = json.loads((folder / "crossval.json").read_text())
    cfg = ServeConfig.model_validate(doc["config"])
    if doc["profiles"][0].startswith("emulated:"):  # the engines' own latencies
        calibration = emulated_calibration(cfg)
    else:
        calibration = load_calibration(Path(doc["profiles"][0]).parent, [m.name for m in cfg.models])
    pools = {int(m): t for m, t in doc.get("memory", {}).get("kv_capacity_tokens", {}).items()}
    calibration = replace(calibration, stack=stack_from_doc(doc.get("stack")), kv=kv_for_sim(cfg, pools))
    traces = {r: read_traces(folder / f"traces-{r}.jsonl", cfg.num_models) for r in doc["summary"]}
    return doc, cfg, calibration, traces


def rediagnose(doc: dict[str, Any], cfg: ServeConfig, calibration: Calibration, traces: dict[str, Any]) -> None:
    """Fill ``doc``'s rescaled predictions (``diagnosis`` and each cell's ``*_rescaled_*``)."""
    stats = {r: estimate_routing_stats(t, cfg.num_models, entry_model=cfg.entry_model) for r, t in traces.items()}
    contexts = {r: (doc["routing"][r]["typical_context"], doc["routing"][r]["typical_extend"]) for r in traces}
    doc["diagnosis"] = add_rescaled_predictions(
        doc["cells"], stats, traces, calibration, contexts, max_batch_of(cfg), doc["sim_s"]
    )


def write_again(doc: dict[str, Any], folder: Path) -> None:
    """Rewrite a run's JSON, markdown (under its own title) and figure."""
    md = folder / "crossval.md"
    title = md.read_text().splitlines()[0].removeprefix("# ") if md.is_file() else f"Cross-validation on {folder.name}"
    write_outputs(doc, {}, folder, title)


def diagnose_outputs(out_dir: str) -> dict[str, Any]:
    """Add the rescaled predictions to a written run (``crossval.json``, its traces and profiles) and rewrite its
    JSON, markdown and figure: ``python -m trserve.crossval.rediagnose OUT_DIR``."""
    folder = Path(out_dir)
    doc, cfg, calibration, traces = read_run(folder)
    rediagnose(doc, cfg, calibration, traces)
    write_again(doc, folder)
    return doc


def dir_command(action: Callable[[str], Any], module: str, argv: list[str] | None = None) -> int:
    """``python -m <module> DIR``: run ``action`` on DIR; a wrong call or a folder it cannot use is one line on
    stderr and exit status 2."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} DIR", file=sys.stderr)
        return 2
    try:
        action(args[0])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(dir_command(diagnose_outputs, "trserve.crossval.rediagnose"))
