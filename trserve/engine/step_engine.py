"""The step engine: one vLLM engine stepped by our scheduler, exactly one token for exactly the given requests.

``StepEngine.step(items)`` appends each item's ``new_token_ids`` to what the engine holds for that request (the
whole prompt on a first visit) and samples one token each. The caller owns the anchors (``trcore.request``): it
passes exactly the tokens this model has not consumed. Requests between steps stay resident with their KV cache
(``handoff="session"``) or are re-added with prefix caching (``handoff="readmit"``); see
:mod:`trserve.engine.handoff`. Not thread-safe: call it from one thread.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any

from trcore.memory import KVBudget
from trserve.engine.core_link import CoreLink, sampling_params, start_core
from trserve.engine.handoff import Resident, handoff_mode
from trserve.engine.signals import EntropySink, top_logprobs_of
from trserve.engine.types import EngineConfig, EngineStepError, StepItem, TokenOut

log = logging.getLogger(__name__)

WARMUP_ID = "__trserve_warmup__"


class StepEngine:
    """A vLLM engine in this process, stepped one token at a time by the caller (see module docstring)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.mode = handoff_mode(config.handoff, config.top_logprobs)
        use_entropy = config.entropy and config.tensor_parallel_size == 1  # the hook needs an in-process runner
        self._sink = EntropySink() if use_entropy else None
        self._link = CoreLink(start_core(config, self._sink))
        self._residents: dict[str, Resident] = {}
        self._ids = itertools.count()
        self._closed = False
        self.vocab_size = int(self._link.core.vllm_config.model_config.get_vocab_size())
        signals = {"token_ids", "top_logprobs"} if config.top_logprobs > 0 else {"token_ids"}
        self.available_signals = frozenset(signals | ({"entropy"} if use_entropy else set()))
        if config.warmup:
            self._warm_up()

    @property
    def num_resident(self) -> int:
        """Requests this engine holds (in session mode each keeps its KV cache between steps)."""
        return len(self._residents)

    def step(self, items: Sequence[StepItem]) -> list[TokenOut]:
        """Run one decode step for exactly ``items``; outputs are in the same order."""
        self._check_step(items)
        engine_ids = [self._submit(item) for item in items]
        try:
            found = self._run_until_sampled(set(engine_ids))
        except EngineStepError:
            for item in items:
                self.release(item.request_id)
            raise
        return [found[eid] for eid in engine_ids]

    def release(self, request_id: str) -> None:
        """Free the request's KV and engine state (finished or aborted); unknown ids are ignored."""
        res = self._residents.pop(request_id, None)
        if res is not None:
            self.mode.release(self._link, res)

    @property
    def kv_capacity_tokens(self) -> int:
        """How many tokens of context the KV cache holds in all (for admission control and tests)."""
        cache = self._link.core.vllm_config.cache_config
        return int(cache.kv_cache_size_tokens or cache.num_gpu_blocks * cache.block_size)

    def kv_budget(self) -> KVBudget:
        """The KV cache as the core accounts it: vLLM's blocks less the one its block pool keeps as the null
        block, its block size, and ``max_num_seqs`` (parked sessions count against it)."""
        cache = self._link.core.vllm_config.cache_config
        return KVBudget(int(cache.num_gpu_blocks) - 1, int(cache.block_size), self.config.max_num_seqs)

    def kv_usage(self) -> float:
        """Fraction of KV cache blocks in use (blocks only held by the prefix cache count as free)."""
        return self._link.kv_usage()

    def close(self) -> None:
        """Shut the engine down; the object is unusable afterwards."""
        if not self._closed:
            self._closed = True
            self._residents.clear()
            self._link.shutdown()

    def __enter__(self) -> StepEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_step(self, items: Sequence[StepItem]) -> None:
        if self._closed:
            raise EngineStepError("engine is closed")
        ids = [item.request_id for item in items]
        if len(set(ids)) != len(ids):
            raise EngineStepError(f"a request appears twice in one step: {sorted(ids)}")
        num_new = sum(1 for rid in ids if rid not in self._residents)
        if len(self._residents) + num_new > self.config.max_num_seqs:
            raise EngineStepError(
                f"{len(self._residents) + num_new} resident requests would exceed max_num_seqs="
                f"{self.config.max_num_seqs} (parked sessions count); release finished requests or raise it"
            )
        culprits = {item.request_id: why for item in items if (why := self._item_problem(item))}
        if culprits:
            raise EngineStepError("; ".join(f"request {r}: {why}" for r, why in culprits.items()), culprits)

    def _item_problem(self, item: StepItem) -> str | None:
        """Why this one item cannot be stepped (checked before anything is submitted), or None."""
        res = self._residents.get(item.request_id)
        length = (len(res.context) if res else 0) + len(item.new_token_ids)
        if length == 0:
            return "a first visit needs its prompt"
        if any(not 0 <= int(t) < self.vocab_size for t in item.new_token_ids):
            return f"token id outside 0..{self.vocab_size - 1}"
        try:
            sampling_params(item.sampling, 0, item.request_id)
        except (TypeError, ValueError) as exc:
            return f"bad sampling settings: {exc}"
        if length + 1 > self.config.max_model_len:
            return f"{length} tokens + 1 exceed max_model_len={self.config.max_model_len}"
        return None

    def _submit(self, item: StepItem) -> str:
        res = self._residents.get(item.request_id)
        if res is None:
            res = self._residents[item.request_id] = Resident(self._fresh_id(item.request_id))
        new_tokens = [int(t) for t in item.new_token_ids]
        self.mode.submit(self._link, res, new_tokens, item.sampling, self._fresh_id(item.request_id))
        res.context.extend(new_tokens)
        return res.engine_id

    def _fresh_id(self, request_id: str) -> str:
        return f"{request_id}#{next(self._ids)}"

    def _run_until_sampled(self, pending: set[str]) -> dict[str, TokenOut]:
        """Step the engine until every request in ``pending`` sampled its token (long prompts may take several
        iterations under chunked prefill; requests that already sampled are parked and do not run again)."""
        found: dict[str, TokenOut] = {}
        while pending:
            outputs, executed = self._link.step()
            entropies = self._sink.take() if self._sink is not None else {}
            for out in outputs:
                if out.request_id in pending and out.new_token_ids:
                    found[out.request_id] = self._token_out(out, entropies.get(out.request_id))
                    pending.discard(out.request_id)
            if pending and not executed:
                raise EngineStepError(
                    f"engine scheduled nothing for {len(pending)} request(s); KV usage {self.kv_usage():.0%}, "
                    f"{self.num_resident} resident (KV cache too small for the parked sessions?)"
                )
        return found

    def _token_out(self, out: Any, entropy: float | None) -> TokenOut:
        top, logprob = top_logprobs_of(out.new_logprobs, self.config.top_logprobs)
        return TokenOut(int(out.new_token_ids[0]), top, entropy, logprob)

    def _warm_up(self) -> None:
        """The first forward pass of a fresh engine is slow (seconds on CPU); pay it before serving."""
        self.step([StepItem(WARMUP_ID, [0, 1, 2])])
        self.release(WARMUP_ID)
