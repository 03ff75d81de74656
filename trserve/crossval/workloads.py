"""The cross-validation workloads (closed loop, greedy, no stop token, so every request runs to its length):

* ``fixed``: each request one chat prompt of ``trserve/data/prompts/routing.jsonl`` (30-50 tokens), exactly
  ``max_tokens`` output tokens;
* ``reasoning``: shaped like the simulator's ``short-reasoning`` preset scaled to the local pair's 2,048-token
  context: prompts of about 100 tokens (four of the routing questions asked together), output lengths drawn
  from ``short-reasoning``'s distribution halved (lognormal, median 600, sigma 0.6, 8 to 1,024 tokens);
* a simulator length preset (``--lengths``, :func:`lengths_workload`): request ``k`` has the prompt length and output
  length the bench's ``--lengths`` load draws for its client 0, request ``k`` (random token ids), so crossval and
  ``tokenrouter bench`` send the same requests.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from trcore.errors import ConfigError
from trserve.bench.requests import Lengths, prompt_ids
from trserve.config import ServeConfig
from trserve.crossval.harness import ClientWorkload
from trserve.engine.stand_in_tokenizer import load_tokenizer
from trserve.paths import PROMPTS_DIR
from trserve.runtime.runspec import resolve_model_path
from trsim.lengths import LengthDist, lognormal

WORKLOADS = ("fixed", "reasoning")
PROMPTS_FILE = PROMPTS_DIR / "routing.jsonl"
#: ``short-reasoning``'s output lengths (median 1,200, up to 2,048) scaled by 1,024 / 2,048.
REASONING_OUTPUT = lognormal(600, 0.6, maximum=1024, minimum=8)
#: Routing questions per reasoning prompt (about 100 tokens with the chat template).
QUESTIONS_PER_PROMPT = 4
#: Drawn output lengths (cycled): enough that no cell repeats the sequence.
NUM_LENGTHS = 4096


def prompt_texts(path: Path = PROMPTS_FILE) -> list[str]:
    """The prompt strings of a ``{"prompt": ...}`` JSONL file."""
    return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]


def reasoning_texts(questions: list[str], per_prompt: int = QUESTIONS_PER_PROMPT) -> list[str]:
    """Every window of ``per_prompt`` consecutive questions (cycled) asked as one reasoning task."""
    out = []
    for k in range(len(questions)):
        picked = [questions[(k + j) % len(questions)] for j in range(per_prompt)]
        numbered = "\n".join(f"{j + 1}. {q}" for j, q in enumerate(picked))
        out.append(f"Think step by step and answer each question, showing your reasoning.\n{numbered}")
    return out


def draw_lengths(dist: LengthDist, count: int, seed: int) -> tuple[int, ...]:
    """``count`` lengths drawn from ``dist`` with a seeded generator (the same sequence on every run)."""
    rng = random.Random(seed)
    return tuple(dist.sample(rng) for _ in range(count))


def make_workload(
    name: str, cfg: ServeConfig, max_tokens: int, warmup_s: float, measure_s: float, seed: int = 0
) -> ClientWorkload:
    """The named workload as token ids of the entry model's tokenizer."""
    if name not in WORKLOADS:
        raise ConfigError("workload", f"unknown workload {name!r}; valid: {', '.join(WORKLOADS)}")
    path = cfg.models[cfg.entry_model].path
    tokenizer = load_tokenizer(resolve_model_path(path) if path else None)  # none: an emulated model
    texts = prompt_texts()
    lengths: tuple[int, ...] = ()
    if name == "reasoning":
        texts = reasoning_texts(texts)
        lengths = draw_lengths(REASONING_OUTPUT, NUM_LENGTHS, seed)
        max_tokens = max(lengths)
    prompts = tuple(tuple(tokenizer.encode_chat([{"role": "user", "content": t}])) for t in texts)
    longest = max(map(len, prompts)) + max_tokens
    if any(longest > m.max_model_len for m in cfg.models):
        raise ConfigError("workload", f"{name}: a request reaches {longest} tokens, beyond a model's max_model_len")
    return ClientWorkload(prompts, max_tokens, warmup_s, measure_s, output_lengths=lengths, name=name)


def lengths_workload(cfg: ServeConfig, lengths: Lengths, warmup_s: float, measure_s: float) -> ClientWorkload:
    """:data:`NUM_LENGTHS` requests drawn from a length preset (see the module docstring), named after it."""
    drawn = [lengths.draw(0, k) for k in range(NUM_LENGTHS)]
    prompts = tuple(tuple(prompt_ids(lengths.rng(0, k), p)) for k, (p, _) in enumerate(drawn))
    outputs = tuple(o for _, o in drawn)
    lengths.check_fits(min(m.max_model_len for m in cfg.models))
    name = lengths.preset if lengths.scale == 1 else f"{lengths.preset}x{lengths.scale:g}"
    return ClientWorkload(prompts, max(outputs), warmup_s, measure_s, output_lengths=outputs, name=name)
