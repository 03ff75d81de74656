"""Re-diagnosing a written cross-validation run: add the rescaled predictions to its ``crossval.json`` (from its
own traces and profiles) and rewrite its JSON, markdown and figure. ``python -m trserve.crossval.rediagnose DIR``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from trcore.routing_stats import estimate_routing_stats
from trserve.crossval.diagnose import add_rescaled_predictions
from trserve.crossval.predict import load_calibration
from trserve.crossval.run import write_outputs
from trserve.crossval.stack import stack_from_doc
from trsim.tracefile import read_traces


def diagnose_outputs(out_dir: str) -> dict[str, Any]:
    """Add the rescaled predictions to a written run (``crossval.json``, its traces and profiles) and rewrite its
    JSON, markdown and figure: ``python -m trserve.crossval.rediagnose OUT_DIR``."""
    folder = Path(out_dir)
    doc = json.loads((folder / "crossval.json").read_text())
    cfg = doc["config"]
    num_models = len(cfg["models"])
    names = [m["name"] for m in cfg["models"]]
    calibration = load_calibration(Path(doc["profiles"][0]).parent, names)
    calibration = replace(calibration, stack=stack_from_doc(doc.get("stack")))
    traces = {r: read_traces(folder / f"traces-{r}.jsonl", num_models) for r in doc["summary"]}
    stats = {r: estimate_routing_stats(t, num_models, entry_model=cfg["entry_model"]) for r, t in traces.items()}
    contexts = {r: (doc["routing"][r]["typical_context"], doc["routing"][r]["typical_extend"]) for r in traces}
    max_batch = min(cfg["batching"]["max_batch"] or 10**9, *(m["max_num_seqs"] for m in cfg["models"]))
    doc["diagnosis"] = add_rescaled_predictions(
        doc["cells"], stats, traces, calibration, contexts, max_batch, doc["sim_s"]
    )
    write_outputs(doc, {}, folder, f"Cross-validation on {folder.name}")
    return doc


if __name__ == "__main__":
    diagnose_outputs(sys.argv[1])
