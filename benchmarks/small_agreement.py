"""How often the prepared small model's greedy token equals the large model's, teacher-forced on answer text.

Both prepared checkpoints read the same sequences (prompt + answer from a ``*_answers.jsonl`` file, as written by
``scripts/small_calibration_text.py``); at every position after the first, the two greedy (argmax) tokens are
compared. Held-out text: answers to ``trserve/data/prompts/routing.jsonl``, which the small model's head never saw:

    .venv/bin/python scripts/small_calibration_text.py --prompts trserve/data/prompts/routing.jsonl \\
        --out /tmp/routing_answers.jsonl --max-tokens 96
    .venv/bin/python benchmarks/small_agreement.py --answers /tmp/routing_answers.jsonl

Writes ``benchmarks/results/small_agreement.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trserve.paths import PROMPTS_DIR  # noqa: E402


def agreement(large, small, sequences: list[list[int]]) -> tuple[int, int]:
    """(positions where the greedy tokens agree, positions compared)."""
    import torch

    hits = total = 0
    with torch.no_grad():
        for ids in sequences:
            batch = torch.tensor([ids])
            top_large = large(batch).logits[0, 1:].argmax(-1)
            top_small = small(batch).logits[0, 1:].argmax(-1)
            hits += int(top_large.eq(top_small).sum())
            total += len(top_large)
    return hits, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=Path, default=PROMPTS_DIR / "small_calibration_answers.jsonl")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "small_agreement.json")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trserve.modelprep import manifest
    from trserve.modelprep.headfit import calibration_sequences
    from trserve.modelprep.pair import prepared_pair

    large_dir, small_dir = prepared_pair()
    tokenizer = AutoTokenizer.from_pretrained(large_dir)
    large, small = (AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for d in (large_dir, small_dir))
    hits, total = agreement(large, small, calibration_sequences(tokenizer, args.answers))
    result = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "answers": str(args.answers),
        "small_recipe": manifest.recipe_of(small_dir),
        "positions": total,
        "greedy_agreement": hits / total,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"greedy agreement {hits}/{total} = {hits / total:.3f}")


if __name__ == "__main__":
    main()
