"""Write the text the small model's output head is fitted on: the large model's greedy answers to shipped prompts.

Reads ``trserve/data/prompts/small_calibration.jsonl`` (``{"id", "prompt", "chat"}``; chat prompts, the default, go
through the chat template), generates greedy answers with the prepared large model in vLLM (float32, CPU), and writes
``trserve/data/prompts/small_calibration_answers.jsonl`` (``{"id", "prompt", "chat", "answer"}``). The answers are
committed, so ``tokenrouter models prepare`` needs only teacher-forced forward passes, not generation.

    .venv/bin/python scripts/small_calibration_text.py [--prompts P] [--out O] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trserve.paths import PROMPTS_DIR  # noqa: E402


def prompt_ids(tokenizer, prompt: str, chat: bool) -> list[int]:
    """Token ids of a prompt as ``trserve.modelprep.headfit`` feeds it when fitting."""
    from trserve.modelprep.headfit import calibration_prompt_ids

    return calibration_prompt_ids(tokenizer, prompt, chat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=Path, default=PROMPTS_DIR / "small_calibration.jsonl")
    ap.add_argument("--out", type=Path, default=PROMPTS_DIR / "small_calibration_answers.jsonl")
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()

    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from trserve.engine.local_llm import shutdown_local_llm, start_local_llm
    from trserve.modelprep.pair import prepared_pair

    large, _small = prepared_pair()
    tokenizer = AutoTokenizer.from_pretrained(large)
    rows = [json.loads(line) for line in args.prompts.read_text().splitlines() if line.strip()]
    prompts = [TokensPrompt(prompt_token_ids=prompt_ids(tokenizer, r["prompt"], r.get("chat", True))) for r in rows]
    llm = start_local_llm(str(large), max_num_seqs=16)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    shutdown_local_llm(llm)
    with args.out.open("w") as out:
        for row, output in zip(rows, outputs, strict=True):
            out.write(json.dumps({**row, "answer": output.outputs[0].text}) + "\n")
    print(f"wrote {len(rows)} answers to {args.out}")


if __name__ == "__main__":
    main()
