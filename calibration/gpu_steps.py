"""Timing one forward step of a random-weight model against a static KV cache (used by gpu_profile.py).

Needs torch and transformers (imported lazily: the device's ``torch`` module is passed in), no vLLM. Works
with transformers 4.x (static cache written at ``cache_position``) and 5.x (a per-layer write counter).
"""

from __future__ import annotations

import gc
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cell:
    """One grid point: ``batch_size`` requests, each with ``cached`` tokens in its KV cache, feeding ``new``
    tokens (1 for a decode step; more for a prefill (``cached == 0``) or a hand-off append)."""

    batch_size: int
    cached: int
    new: int

    def sample(self, latency_s: float) -> dict[str, Any]:
        """A profile sample, in ``trcore.Batch`` terms: context tokens summed over the batch (each request's
        sequence length at launch, new tokens included), extend tokens = tokens fed beyond one per request."""
        return {"batch_size": self.batch_size, "context_tokens": self.batch_size * (self.cached + self.new),
                "extend_tokens": self.batch_size * (self.new - 1), "latency_s": latency_s}  # fmt: skip

    def describe(self) -> str:
        kind = "decode" if self.new == 1 else ("prefill" if self.cached == 0 else "extend")
        return f"{kind} b={self.batch_size} ctx={self.cached} new={self.new}"


def shape_summary(cfg: Any) -> dict[str, int]:
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    h, inter, layers, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    per_layer = h * head_dim * (2 * heads + 2 * kv_heads) + 3 * h * inter
    embed = vocab * h * (1 if getattr(cfg, "tie_word_embeddings", False) else 2)
    return {"layers": layers, "hidden": h, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "intermediate": inter, "vocab": vocab, "params": layers * per_layer + embed}  # fmt: skip


def bytes_needed(shape: dict[str, int], cell: Cell, elt: int) -> int:
    """KV cache plus a generous bound on activations (attention scores in fp32 if the math path runs)."""
    b, q, span = cell.batch_size, cell.new, cell.cached + cell.new
    kv = 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * b * span * elt
    act = 2 * b * q * (6 * shape["hidden"] + 3 * shape["intermediate"]) * elt + 4 * b * shape["vocab"]
    return kv + act + 4 * b * shape["heads"] * q * span


class Device:
    """Timing, memory and sync for one torch device ('cuda' uses CUDA events; 'cpu' a monotonic clock)."""

    def __init__(self, torch: Any, name: str) -> None:
        self.torch, self.name, self.is_cuda = torch, name, name.startswith("cuda")
        self.dtype = torch.bfloat16 if self.is_cuda else torch.float32

    def free_bytes(self) -> int:
        if self.is_cuda:  # blocks the caching allocator holds but does not use are free for us too
            cuda = self.torch.cuda
            return int(cuda.mem_get_info()[0] + cuda.memory_reserved() - cuda.memory_allocated())
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

    def time_call(self, call: Callable[[], Any]) -> float:
        if not self.is_cuda:
            start = time.perf_counter()
            call()
            return time.perf_counter() - start
        begin, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        call()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3

    def release(self) -> None:
        """Free a dropped model: collect garbage, hand cached device memory back."""
        gc.collect()
        self.trim()

    def trim(self) -> None:
        """Hand cached device memory back (a freed CUDA graph's pool, a cell's KV cache): cheap, no gc."""
        if self.is_cuda:
            self.torch.cuda.empty_cache()

    def machine(self, tag: str) -> dict[str, Any]:
        """The profile's ``machine`` block: a one-line description plus the facts behind it."""
        torch = self.torch
        info = {"tag": tag, "device": self.name, "dtype": dtype_name(self.dtype), "cpu_count": os.cpu_count(),
                "platform": platform.platform(), "torch": torch.__version__,
                "transformers": transformers_version()}  # fmt: skip
        if self.is_cuda:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            info.update(accelerator=props.name, memory_bytes=props.total_memory, cuda=torch.version.cuda)
            where = f"1x {props.name} ({props.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
        else:
            info.update(num_threads=torch.get_num_threads(), memory_bytes=_ram_bytes())
            where = f"{platform.machine()} CPU, {os.cpu_count()} cores, torch threads: {torch.get_num_threads()}"
        info["description"] = f"{where}, {info['dtype']}, torch {torch.__version__}"
        return info


def transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _ram_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def hardware_tag(device: Device) -> str:
    """The profile directory name: from the GPU's name, or 'cpu-<n>core' on CPU."""
    if not device.is_cuda:
        return f"cpu-{os.cpu_count()}core"
    cuda = device.torch.cuda
    return tag_from_device_name(cuda.get_device_name(cuda.current_device()))


def tag_from_device_name(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA GeForce RTX 4090' -> 'rtx-4090': vendor words dropped, rest joined."""
    words = name.replace("_", " ").split()
    kept = [w for w in words if w.lower() not in {"nvidia", "geforce", "tesla", "amd", "radeon"}]
    return "-".join(kept or words).lower()


class StepRunner:
    """One grid cell on a built model: a static KV cache of exactly ``cached + new`` slots (attention then
    spans the whole context, as in an engine step), random input ids, and a call that resets the cache
    write position so the same step can be repeated. The cache contents stay zeros: timing does not
    depend on values."""

    def __init__(self, model: Any, device: Device, cell: Cell) -> None:
        import inspect

        from transformers import StaticCache

        torch = device.torch
        span, b, q = cell.cached + cell.new, cell.batch_size, cell.new
        accepted = inspect.signature(StaticCache.__init__).parameters
        # transformers 5.x sizes the cache lazily from the first step; 4.x wants batch, device and dtype
        wanted = {"config": model.config, "max_cache_len": span, "device": device.name, "dtype": device.dtype,
                  "max_batch_size" if "max_batch_size" in accepted else "batch_size": b}  # fmt: skip
        self.cache = StaticCache(**{k: v for k, v in wanted.items() if k in accepted})
        positions = torch.arange(cell.cached, span, device=device.name)
        self.kwargs: dict[str, Any] = {
            "input_ids": torch.randint(0, model.config.vocab_size, (b, q), device=device.name),
            "position_ids": positions.expand(b, q),
            "past_key_values": self.cache,
            "use_cache": True,
        }
        params = inspect.signature(model.forward).parameters
        if "cache_position" in params:  # transformers 4.x writes the static cache at these slots
            self.kwargs["cache_position"] = positions
        for name in ("logits_to_keep", "num_logits_to_keep"):  # engines compute logits for the last token only
            if name in params:
                self.kwargs[name] = 1
                break
        self.model, self.cached = model, cell.cached

    def __call__(self) -> Any:
        for layer in getattr(self.cache, "layers", ()):  # transformers 5.x advances a write counter per call
            if hasattr(layer, "cumulative_length"):
                layer.cumulative_length.fill_(self.cached)
        return self.model(**self.kwargs)


def capture_graph(torch: Any, call: Callable[[], Any]) -> Callable[[], Any]:
    """Record ``call`` as a CUDA graph (as vLLM does for decode steps) and return its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    replay: Callable[[], Any] = graph.replay
    return replay


def build_model(cfg: Any, device: Device) -> Any:
    """Random-weight model built directly on the device in the target dtype (a 32B model would not fit in
    fp32 first)."""
    from transformers import AutoModelForCausalLM

    torch = device.torch
    # transformers 4.x builds in config.torch_dtype, 5.x in config.dtype (and warns about torch_dtype)
    setattr(cfg, "dtype" if int(transformers_version().split(".")[0]) >= 5 else "torch_dtype", device.dtype)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(device.dtype)
    try:
        with torch.device(device.name):
            model = AutoModelForCausalLM.from_config(cfg)
    finally:
        torch.set_default_dtype(previous)
    return model.to(device.dtype).eval()


def cost_proxy(shape: dict[str, int], cell: Cell) -> float:
    """Rough FLOPs of a cell (weights plus attention), to run cheap cells first."""
    tokens = cell.batch_size * cell.new
    attention = 4 * shape["layers"] * shape["heads"] * shape["head_dim"] * tokens * (cell.cached + cell.new)
    return 2.0 * shape["params"] * tokens + attention
