"""Predicting a written cross-validation run again with the current simulator, its measurements kept:
``python -m trserve.crossval.repredict DIR`` (computation only; no engine starts).

Every input the simulator took is in the run's folder: the input repeat's traces (``traces-<router>.jsonl``), the
profiles it names, the drift factors it applied, the stack costs it probed, the engines' KV pools, and per rate cell
the scored repeats' arrival seeds, the admission limit and the client's send lag. This re-runs the simulator on
them for every cell (a rate cell pooling the current :data:`~trserve.crossval.sim_open.TRACE_ASSIGNMENTS`), scores
it against the same measurements, rewrites the JSON, markdown and figure, and records when (``repredicted``). A
change to the simulator is then judged on the runs it was already judged on, without a new run's own noise.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trserve.crossval.diagnose import rescaled
from trserve.crossval.plan import Rate, cell_load
from trserve.crossval.predict import sim_result
from trserve.crossval.rediagnose import dir_command, read_run, rediagnose, write_again
from trserve.crossval.run import summarize_cells
from trserve.crossval.scoring import add_simulation, max_batch_of
from trserve.crossval.sim_open import TRACE_ASSIGNMENTS, Replay, replay_of


def repredict_outputs(out_dir: str) -> dict[str, Any]:
    """Re-simulate every cell of the run written under ``out_dir`` and rewrite its outputs (see the module)."""
    folder = Path(out_dir)
    doc, cfg, calibration, traces = read_run(folder)
    factors = doc["drift"].get("factors", [1.0] * cfg.num_models)  # as the run applied them (1.0 unless scaled)
    predictor, cap = rescaled(calibration, factors), max_batch_of(cfg)
    for cell in doc["cells"]:
        load = cell_load(cell)
        sim_load: int | Replay = load
        if isinstance(load, Rate):
            sim_load = replace(replay_of(cell), assignments=TRACE_ASSIGNMENTS)
        sim = sim_result(traces[cell["router"]], predictor, sim_load, tuple(cell["thresholds"]), cap, doc["sim_s"])
        add_simulation(cell, sim, sim_load, cfg.entry_model)
    out_of_sample = all(entry.get("out_of_sample", False) for entry in doc["summary"].values())
    doc["summary"] = summarize_cells(doc["cells"], out_of_sample)
    rediagnose(doc, cfg, calibration, traces)
    command = f"python -m trserve.crossval.repredict {out_dir}"
    doc["repredicted"] = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command,
                          "measured": doc["created"]}  # fmt: skip
    write_again(doc, folder)
    return doc


if __name__ == "__main__":
    sys.exit(dir_command(repredict_outputs, "trserve.crossval.repredict"))
