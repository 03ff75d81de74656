"""Routing signals from a vLLM step: top-k logprobs from the engine's output, exact entropy from a logits hook.

vLLM returns top-k logprobs but not the entropy of the full next-token distribution. :class:`EntropyRecorder`
is a vLLM v1 logits processor that leaves the logits untouched and records, per batch row, the entropy of the
raw (temperature-1, unpenalized) distribution. It only works when the model runner lives in this process (the
in-process executor :class:`trserve.engine.step_engine.StepEngine` uses); rows are mapped to request ids through the
documented ``BatchUpdate`` protocol, reading the id from ``SamplingParams.extra_args``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Key under ``SamplingParams.extra_args`` that carries the engine-level request id.
REQUEST_ID_KEY = "trserve_request_id"


@dataclass
class EntropySink:
    """Where an :class:`EntropyRecorder` leaves the entropies of the last sampled batch (request id -> nats)."""

    latest: dict[str, float] = field(default_factory=dict)

    def take(self) -> dict[str, float]:
        out, self.latest = self.latest, {}
        return out


class EntropyRecorder:
    """Records per-request entropy of the raw logits; never changes them. The vLLM ``LogitsProcessor`` base is
    added by :func:`entropy_recorder_for`, so importing this module imports neither vLLM nor torch (the server
    process imports it through the worker module without ever starting an engine).

    Declared not argmax-invariant on purpose: vLLM skips argmax-invariant processors for greedy batches, and
    greedy batches need their entropy too.
    """

    sink: EntropySink  # set on the per-engine subclass

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self.rows: dict[int, str] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: Any) -> None:
        from vllm.v1.sample.logits_processor.builtin import process_dict_updates

        process_dict_updates(self.rows, batch_update, _request_id_of)

    def apply(self, logits: Any) -> Any:
        import torch

        logprobs = torch.log_softmax(logits.float(), dim=-1)
        # 0 * -inf is nan for masked tokens; they carry no probability, so they add nothing.
        entropy = -torch.nan_to_num(logprobs.exp() * logprobs, nan=0.0).sum(dim=-1)
        values = entropy.tolist()
        self.sink.latest = {rid: values[i] for i, rid in self.rows.items() if i < len(values)}
        return logits


def _request_id_of(params: Any, prompt_ids: list[int] | None, output_ids: list[int]) -> str | None:
    extra = getattr(params, "extra_args", None) or {}
    rid = extra.get(REQUEST_ID_KEY)
    return str(rid) if rid is not None else None


def entropy_recorder_for(sink: EntropySink) -> type[EntropyRecorder]:
    """A vLLM logits-processor class bound to ``sink`` (vLLM instantiates processors itself, so the sink rides on
    the class)."""
    from vllm.v1.sample.logits_processor import LogitsProcessor

    return type("BoundEntropyRecorder", (EntropyRecorder, LogitsProcessor), {"sink": sink})


def top_logprobs_of(logprobs: Any, k: int) -> tuple[dict[int, float], float | None]:
    """Top-k candidates (token id -> logprob) and the sampled token's logprob, from one request's
    ``LogprobsLists`` row (column 0 is the sampled token, columns 1..k the top-k)."""
    if logprobs is None or k <= 0:
        return {}, None
    ids = logprobs.logprob_token_ids[0].tolist()
    values = logprobs.logprobs[0].tolist()
    top = {int(t): float(v) for t, v in zip(ids[1 : k + 1], values[1 : k + 1], strict=True)}
    return top, float(values[0])
