"""Profile shape-only model configs with random weights on one device, without vLLM; write calibration profiles.

Prepared for a CUDA machine that has PyTorch and transformers but no vLLM, to finish in one call of at most
10 minutes (``--budget-s``); also runs on CPU (that is how it is tested). For every shape config under
``--shapes-dir`` (``<name>.json`` or ``<name>/config.json``, HF config.json style) it builds the model with
random weights and times batched forward steps against a static KV cache over a grid of batch sizes, context
lengths and appended token counts, then writes ``<out-dir>/<hardware-tag>/<name>.json`` in the calibration
profile schema (``trsim.profile``, docs/profile-schema.md). What does not fit in memory or in the time budget
is skipped and listed in the profile. Needs torch, transformers and numpy; uses the repository's pure
``trsim.latency`` for the latency models' features, ``trsim.fit`` when scipy is installed (else a numpy
fallback) and ``trsim.profile`` to validate when pydantic is installed.

    python calibration/gpu_profile.py --device cuda --budget-s 540
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for trsim and calibration

from calibration.gpu_files import find_shapes, load_config, log, profile_record, write_profile  # noqa: E402
from calibration.gpu_steps import (  # noqa: E402
    Cell,
    Device,
    StepRunner,
    build_model,
    bytes_needed,
    capture_graph,
    cost_proxy,
    dtype_name,
    hardware_tag,
    shape_summary,
    tag_from_device_name,
    transformers_version,
)
from calibration.profile_fit import fit_all, numpy_fit  # noqa: E402

__all__ = ["main", "numpy_fit", "tag_from_device_name"]

GPU_GRID = {"batch": [1, 2, 4, 8, 16, 32, 64, 128, 256], "context": [128, 512, 2048, 8192],
            "extend": [16, 64, 256, 1024, 4096], "extend_context": [0, 2048], "batch_extend": [1, 4]}  # fmt: skip
CPU_GRID = {"batch": [1, 2, 4, 8], "context": [64, 256, 1024], "extend": [16, 64, 256], "extend_context": [0],
            "batch_extend": [1]}  # fmt: skip
#: A model whose share of the remaining budget is smaller is not started (building it alone may take that long).
MIN_MODEL_SHARE_S = 5.0


class UsageError(Exception):
    """Bad option: printed as one ``error: <field>: <problem>`` line, exit status 2."""


class Profiler:
    """Runs the grid for one model after another; remembers whether CUDA graphs work on this machine."""

    def __init__(self, device: Device, args: argparse.Namespace) -> None:
        self.device, self.args = device, args
        # Per kind of step ("decode" / "extend"): whether CUDA-graph capture is on, and why not if it is off.
        on = device.is_cuda and not args.no_cuda_graphs
        self.use_graphs = {"decode": on, "extend": on}
        self.graph_notes: list[str] = [] if on or not device.is_cuda else ["CUDA graphs disabled by option"]

    def profile(self, name: str, path: Path, cfg: Any, deadline: float) -> dict[str, Any]:
        """Build ``cfg`` with random weights, time its grid until ``deadline``; return the profile."""
        shape = shape_summary(cfg)
        elt = 2 if self.device.is_cuda else 4
        samples: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        model = build_model(cfg, self.device)
        max_pos = getattr(cfg, "max_position_embeddings", None) or 1 << 30
        out_of_time = False
        for cell in sorted(grid_cells(self.args), key=lambda c: cost_proxy(shape, c)):
            reason = "budget: an earlier, cheaper cell ran out of time" if out_of_time else None
            reason = reason or self._skip_reason(shape, cell, elt, max_pos)
            times = self._time_cell(model, cell, deadline) if reason is None else reason
            if isinstance(times, str):
                out_of_time = out_of_time or times.startswith("budget")
                skipped.append({"cell": cell.describe(), "reason": times})
                log(f"[{name}] {cell.describe()}: skipped ({times})")
                continue
            samples.extend(cell.sample(t) for t in times)
            med, spread = float(np.median(times)), float(np.std(times) / np.mean(times))
            log(f"[{name}] {cell.describe()}: {med * 1e3:.2f} ms median, spread {spread:.1%} ({len(times)} reps)")
        del model
        self.device.release()
        return self._assemble(name, path, cfg, shape, samples, skipped)

    def _skip_reason(self, shape: dict[str, int], cell: Cell, elt: int, max_pos: int) -> str | None:
        if cell.cached + cell.new > max_pos:
            return f"context {cell.cached + cell.new} beyond max_position_embeddings {max_pos}"
        need, free = bytes_needed(shape, cell, elt), self.device.free_bytes()
        if need > 0.9 * free:
            return f"memory: needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        return None

    def _time_cell(self, model: Any, cell: Cell, deadline: float) -> list[float] | str:
        """The cell's timed repeats, or why it was skipped (a string)."""
        torch, args = self.device.torch, self.args
        if time.monotonic() >= deadline:
            return "budget: the model's share of the time budget is spent"
        try:
            with torch.inference_mode():
                runner = StepRunner(model, self.device, cell)
                probe = self.device.time_call(runner)  # also allocates the cache
                if time.monotonic() + probe * (args.warmup + args.repeats + 1) > deadline:
                    return f"budget: ~{probe * (args.warmup + args.repeats + 1):.1f} s needed"
                for _ in range(args.warmup):
                    runner()
                call = self._maybe_graph(runner, "decode" if cell.new == 1 else "extend")
                return [self.device.time_call(call) for _ in range(args.repeats)]
        except getattr(torch, "OutOfMemoryError", MemoryError):
            return "out of memory"
        except Exception as exc:  # keep the samples measured so far; the cell says what went wrong
            return f"error: {type(exc).__name__}: {str(exc)[:160]}"
        finally:
            self.device.trim()

    def _maybe_graph(self, runner: StepRunner, kind: str) -> Callable[[], Any]:
        if not self.use_graphs[kind]:
            return runner
        try:
            return capture_graph(self.device.torch, runner)
        except Exception as exc:  # transformers code that cannot be captured: time this kind eagerly, say so
            self.use_graphs[kind] = False
            note = f"{kind} steps eager: CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:160]})"
            self.graph_notes.append(note)
            log(f"warning: {note}")
            if self.device.torch.cuda.is_available():
                self.device.torch.cuda.synchronize()
            return runner

    def _assemble(self, name: str, path: Path, cfg: Any, shape: dict[str, int], samples: list[dict[str, Any]],
                  skipped: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
        fits, fitter = fit_all(samples) if samples else ([], "none (no samples)")
        machine = self.device.machine(self.args.hardware_tag or hardware_tag(self.device))
        # The schema has no top-level room for how the samples were taken; machine keeps extra keys.
        machine.update(method=self._method(cfg, path, fitter), model_shape=shape, skipped=skipped)
        return profile_record(name, self._backend(), machine, samples, fits)

    def _backend(self) -> str:
        """Engine and settings in one line, as docs/profile-schema.md asks (``machine.method`` has the rest)."""
        graphs = [kind for kind, on in self.use_graphs.items() if on]
        launch = f"CUDA graphs for {'+'.join(graphs)}" if graphs else "eager"
        return f"transformers {transformers_version()} StaticCache, {dtype_name(self.device.dtype)}, {launch}"

    def _method(self, cfg: Any, path: Path, fitter: str) -> str:
        args, dev = self.args, self.device
        graphs = [kind for kind, on in self.use_graphs.items() if on]
        timing = f"CUDA events; CUDA-graph replays for {' and '.join(graphs)} steps" if graphs else "CUDA events, eager"
        timing = timing if dev.is_cuda else "time.perf_counter, eager"
        arch = (getattr(cfg, "architectures", None) or [cfg.model_type])[0]
        return (
            f"calibration/gpu_profile.py: transformers {transformers_version()} {arch} built from the shape "
            f"config {path.name} with random weights (torch seed {args.seed}), {dtype_name(dev.dtype)} on "
            f"{dev.name}, attention {getattr(cfg, '_attn_implementation', None) or 'default'}, no vLLM. Each "
            "sample is one batched forward step with every request alike: each has the same number of tokens "
            "in a transformers StaticCache sized exactly to its sequence (contents zeros; attention spans the "
            "whole cache) and feeds the same number of random token ids (1 for decode; more for prefill or a "
            "hand-off append); logits for the last position only. Per cell: one probe call, "
            f"{args.warmup} warm-up calls, then {args.repeats} timed repeats, one sample each ({timing}"
            f"{''.join('; ' + n for n in self.graph_notes)}). Cells run cheapest first within a per-model "
            "share of the time budget; skipped cells are listed with the reason. Fits: least squares on "
            f"relative error, non-negative coefficients, over all samples ({fitter})."
        )


def grid_cells(args: argparse.Namespace) -> list[Cell]:
    decode = [Cell(b, ctx, 1) for b in args.batch_sizes for ctx in args.context_lens]
    extend = [Cell(b, ctx, q) for b in args.extend_batch_sizes for ctx in args.extend_context_lens
              for q in args.extend_tokens]  # fmt: skip
    return decode + extend


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes-dir", type=Path, default=REPO / "models" / "shapes")
    ap.add_argument("--out-dir", type=Path, default=REPO / "calibration" / "profiles")
    ap.add_argument("--budget-s", type=float, default=540.0, help="whole run, all models (default 540)")
    ap.add_argument("--models", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available)")
    ap.add_argument("--hardware-tag", default=None, help="default: from the device name, or cpu-<n>core")
    ap.add_argument("--batch-sizes", type=_int_list, default=None)
    ap.add_argument("--context-lens", type=_int_list, default=None)
    ap.add_argument("--extend-tokens", type=_int_list, default=None, help="tokens appended per request")
    ap.add_argument("--extend-context-lens", type=_int_list, default=None, help="0 = prefill")
    ap.add_argument("--extend-batch-sizes", type=_int_list, default=None)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--no-cuda-graphs", action="store_true", help="time eager launches instead of graph replays")
    return ap.parse_args(argv)


def resolve(args: argparse.Namespace, torch: Any) -> tuple[Device, dict[str, Path]]:
    """Fill grid defaults for the device and pick the shapes; bad values raise UsageError."""
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("device", "CUDA is not available on this machine; use --device cpu")
    if not (name == "cpu" or name.startswith("cuda")):
        raise UsageError("device", f"must be cuda, cuda:N or cpu, got {name!r}")
    if args.repeats < 1 or args.warmup < 0 or args.budget_s <= 0:
        raise UsageError("repeats", "--repeats must be >= 1, --warmup >= 0 and --budget-s > 0")
    defaults = GPU_GRID if name.startswith("cuda") else CPU_GRID
    for field, key in [("batch_sizes", "batch"), ("context_lens", "context"), ("extend_tokens", "extend"),
                       ("extend_context_lens", "extend_context"), ("extend_batch_sizes", "batch_extend")]:  # fmt: skip
        if getattr(args, field) is None:
            setattr(args, field, defaults.get(key, [1]))
    if min(args.batch_sizes + args.extend_batch_sizes + args.extend_tokens) < 1:
        raise UsageError("batch_sizes", "batch sizes and extend token counts must be >= 1")
    shapes = find_shapes(args.shapes_dir)
    if not shapes:
        raise UsageError("shapes_dir", f"no shape configs (JSON with model_type) in {args.shapes_dir}")
    wanted = [m for m in args.models.split(",") if m.strip()] or sorted(shapes)
    unknown = sorted(set(wanted) - set(shapes))
    if unknown:
        raise UsageError("models", f"unknown {unknown}; valid: {', '.join(sorted(shapes))}")
    if name.startswith("cuda:"):
        torch.cuda.set_device(torch.device(name))
    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    return Device(torch, name), {m: shapes[m] for m in wanted}


def run(args: argparse.Namespace) -> int:
    """Profile every chosen shape within the budget; returns the process exit status."""
    import torch

    deadline = time.monotonic() + args.budget_s
    device, shapes = resolve(args, torch)
    out_dir = args.out_dir / (args.hardware_tag or hardware_tag(device))
    out_dir.mkdir(parents=True, exist_ok=True)
    configs = {m: c for m, c in ((m, _guarded(m, load_config, p)) for m, p in shapes.items()) if c is not None}
    order = sorted(configs, key=lambda m: shape_summary(configs[m])["params"])  # leftovers flow to big models
    profiler, written = Profiler(device, args), []
    for k, name in enumerate(order):
        torch.manual_seed(args.seed)
        share = (deadline - time.monotonic()) / (len(order) - k)
        weights = shape_summary(configs[name])["params"] * (2 if device.is_cuda else 4)
        if share < MIN_MODEL_SHARE_S or weights > 0.9 * device.free_bytes():
            reason = "no time left" if share < MIN_MODEL_SHARE_S else "weights do not fit in memory"
            log(f"[{name}] skipped: {reason}")
            continue
        profile = _guarded(name, profiler.profile, name, shapes[name], configs[name], time.monotonic() + share)
        if profile is None or not profile["samples"]:
            log(f"[{name}] no samples, no profile written")
            device.release()
            continue
        written.append(write_profile(profile, out_dir))
        fits = [f"{f['model']} mape {f['mape']:.1%}" for f in [profile["fit"], *profile["other_fits"]] if f]
        num_skipped = len(profile["machine"]["skipped"])
        log(f"[{name}] {len(profile['samples'])} samples, {num_skipped} cells skipped, fits: {', '.join(fits)}")
    elapsed = args.budget_s - (deadline - time.monotonic())
    log(f"wrote {len(written)} of {len(shapes)} profiles under {out_dir} in {elapsed:.0f} s")
    return 0 if written else 1


def _guarded(name: str, func: Callable[..., Any], *args: Any) -> Any:
    """One model's failure (an architecture this transformers lacks, a CUDA error) must not cost the others."""
    try:
        return func(*args)
    except Exception as exc:
        log(f"[{name}] failed: {type(exc).__name__}: {str(exc)[:300]}")
        return None


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    except UsageError as exc:
        field, problem = exc.args
        print(f"error: {field}: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
