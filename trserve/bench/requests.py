"""What each closed-loop client sends when the bench takes a length preset (``--lengths``): request ``i`` of client
``k`` has a prompt and an output length drawn from one of the simulator's presets (``trsim.workload.PRESETS``,
optionally scaled), seeded by ``(seed, k, i)``, so every system and every memory setting gets the same requests.

With a Markov chain ``(P, C)`` each request also carries its routing as a schedule for the ``schedule`` routing
program (``trcore.programs.schedule``): the chain walked from the entry model with the request's own seed, one
``[destination, kept]`` per step. A request's routing, and so (on deterministic engines) its text, is then the
same in every run, whatever else shares its batches.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trcore.errors import ConfigError
from trsim.lengths import LengthDist
from trsim.workload import PRESETS

#: Prompt token ids are drawn from this range (ordinary text tokens of every vocabulary the pairs use).
PROMPT_IDS = (200, 10_000)
#: Schedule entries beyond the steps the walk needed: a request's steps can outnumber its committed tokens.
SCHEDULE_SLACK = 16


@dataclass(frozen=True)
class Lengths:
    """Prompt and output lengths of a preset, every length times ``scale`` (see ``LengthDist.scaled``)."""

    preset: str
    scale: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigError("--lengths", f"unknown preset {self.preset!r}; valid: {', '.join(sorted(PRESETS))}")
        if not 0 < self.scale < math.inf:  # NaN too
            raise ConfigError("--length-scale", f"must be > 0 and finite, got {self.scale}")
        if PRESETS[self.preset].output_tokens.maximum is None:
            raise ConfigError("--lengths", f"preset {self.preset!r} has unbounded outputs; a bench needs a maximum")

    @property
    def dists(self) -> tuple[LengthDist, LengthDist]:
        """The (prompt, output) length distributions."""
        base = PRESETS[self.preset]
        return base.prompt_tokens.scaled(self.scale), base.output_tokens.scaled(self.scale)

    @property
    def max_total_tokens(self) -> int:
        """The longest request: the largest prompt plus the largest output."""
        prompt, output = self.dists
        assert output.maximum is not None
        return (prompt.maximum if prompt.maximum is not None else round(prompt.mean_hint * 10)) + output.maximum

    def check_fits(self, max_model_len: int) -> None:
        """Refuse (``--lengths``) a preset whose longest request exceeds ``max_model_len`` tokens."""
        if self.max_total_tokens > max_model_len:
            raise ConfigError("--lengths", f"{self.preset} x {self.scale:g} allows {self.max_total_tokens} tokens per "
                              f"request, beyond max_model_len {max_model_len}; lower --length-scale or raise "
                              "max_model_len")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """What a bench JSON records: the preset, the scale, the seed and the mean lengths."""
        prompt, output = self.mean_lengths()
        return {"preset": self.preset, "scale": self.scale, "seed": self.seed, "mean_prompt_tokens": prompt,
                "mean_output_tokens": output, "max_total_tokens": self.max_total_tokens}  # fmt: skip

    def rng(self, client: int, index: int) -> random.Random:
        return random.Random(f"{self.seed}:{client}:{index}")

    def draw(self, client: int, index: int) -> tuple[int, int]:
        """Request ``index`` of client ``client``: its (prompt, output) token counts."""
        rng = self.rng(client, index)
        prompt, output = self.dists
        return prompt.sample(rng), output.sample(rng)

    def mean_lengths(self, num: int = 4000) -> tuple[float, float]:
        """Mean prompt and output lengths over the first ``num`` requests of clients 0..."""
        pairs = [self.draw(k, i) for k in range(40) for i in range(num // 40)]
        return sum(p for p, _ in pairs) / len(pairs), sum(o for _, o in pairs) / len(pairs)


def prompt_ids(rng: random.Random, num_tokens: int) -> list[int]:
    """``num_tokens`` prompt token ids from ``rng``."""
    lo, hi = PROMPT_IDS
    return [rng.randrange(lo, hi) for _ in range(num_tokens)]


def markov_schedule(
    P: Sequence[Sequence[float]], C: Sequence[Sequence[float]], rng: random.Random, num_tokens: int, entry: int = 0
) -> list[list[Any]]:
    """The chain walked from ``entry`` until ``num_tokens`` tokens are kept: after a step on model ``i`` the request
    goes to ``j`` with probability ``P[i][j]`` and the step's token is kept with probability ``C[i][j]`` (the
    simulator's ``markov`` router, per request). :data:`SCHEDULE_SLACK` more steps follow, in case."""
    out: list[list[Any]] = []
    model, kept_total = entry, 0
    while kept_total < num_tokens:
        row = P[model]
        dest = _pick(row, rng.random())
        kept = C[model][dest] >= 1.0 or rng.random() < C[model][dest]
        out.append([dest, kept])
        kept_total += int(kept)
        model = dest
    out.extend([model, True] for _ in range(SCHEDULE_SLACK))
    return out


def _pick(row: Sequence[float], u: float) -> int:
    acc = 0.0
    for j, p in enumerate(row):
        acc += p
        if u < acc:
            return j
    return max(j for j, p in enumerate(row) if p > 0)


Matrix = Sequence[Sequence[float]]


def request_body(lengths: Lengths, client: int, index: int, routing: tuple[Matrix, Matrix] | None) -> dict[str, Any]:
    """The streamed completion request ``index`` of client ``client``: token-id prompt, ``max_tokens`` the drawn
    output length (``ignore_eos``, greedy), and with ``routing`` = (P, C) its schedule in ``routing_extra``."""
    num_prompt, num_output = lengths.draw(client, index)
    rng = lengths.rng(client, index)
    body: dict[str, Any] = {
        "model": "tokenrouter", "prompt": prompt_ids(rng, num_prompt), "max_tokens": num_output, "temperature": 0.0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    if routing is not None:
        body["routing_extra"] = {"schedule": markov_schedule(*routing, rng, num_output)}
    return body
