"""Quality results as files: the JSON document, a markdown table, the plot of quality against the large model's
token share (one curve per program, end points marked), and operating points chosen from them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trserve.quality.sweep import LARGE_ONLY, SMALL_ONLY


def _params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per sweep point (answers left out)."""
    titles = ("program", "params", "large share", "accuracy", "rel. accuracy", "exact match", "token agreement",
              "mean logprob", "tokens")  # fmt: skip
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    for r in rows:
        lines.append(
            f"| {r['name']} | {_params(r['params'])} | {r['large_share']:.1%} | {r['accuracy']:.1%} | "
            f"{r['relative_accuracy']:.1%} | {r['exact_match']:.1%} | {r['token_agreement']:.1%} | "
            f"{r['mean_logprob']:.3f} | {r['mean_output_tokens']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def cheapest(
    rows: Sequence[Mapping[str, Any]], program: str, target: float, probe_contains: str | None = None
) -> Mapping[str, Any] | None:
    """The point of ``program`` with the smallest large-model share whose accuracy relative to large-only reaches
    ``target`` (ties: the more accurate) and, given ``probe_contains``, whose every probe answer contains it; None
    when no point does."""
    fits = [
        r
        for r in rows
        if r["name"] == program
        and r["relative_accuracy"] >= target
        and (probe_contains is None or all(probe_contains in a for a in r.get("probe_answers", {}).values()))
    ]
    return min(fits, key=lambda r: (r["large_share"], -r["accuracy"])) if fits else None


def operating_point(row: Mapping[str, Any], target: float, command: str) -> dict[str, Any]:
    """A committed operating point: the program, its parameters, and what they measured."""
    return {
        "program": row["program"],
        "params": dict(row["params"]),
        "target_relative_accuracy": target,
        "large_share": round(row["large_share"], 4),
        "accuracy": round(row["accuracy"], 4),
        "relative_accuracy": round(row["relative_accuracy"], 4),
        "command": command,
    }


def write_outputs(doc: Mapping[str, Any], out: Path) -> list[Path]:
    """``quality.json``, ``quality.md`` and ``quality.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = doc["rows"]
    paths = [out / "quality.json", out / "quality.md", out / "quality.png"]
    paths[0].write_text(json.dumps(doc, indent=1) + "\n")
    header = (
        f"# Answer quality per routing program\n\n{doc['num_questions']} questions of `{doc['eval_set']}`, "
        f"greedy, chat template, at most {doc['max_tokens']} tokens; made by `{doc['command']}`.\n\n"
    )
    paths[1].write_text(header + markdown_table(rows))
    plot(rows, paths[2])
    return paths


def plot(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Accuracy (left) and token agreement (right) against the large model's share, one curve per program."""
    import matplotlib  # heavy: only where a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ends = {r["name"]: r for r in rows if r["name"] in (LARGE_ONLY, SMALL_ONLY)}
    names = [n for n in dict.fromkeys(r["name"] for r in rows) if n not in ends]
    for ax, key, label in (
        (axes[0], "accuracy", "accuracy vs references"),
        (axes[1], "token_agreement", "token agreement with the large model"),
    ):
        for name in names:
            pts = sorted((r["large_share"], r[key]) for r in rows if r["name"] == name)
            pts = [(ends[SMALL_ONLY]["large_share"], ends[SMALL_ONLY][key])] * (SMALL_ONLY in ends) + pts
            pts += [(ends[LARGE_ONLY]["large_share"], ends[LARGE_ONLY][key])] * (LARGE_ONLY in ends)
            ax.plot(*zip(*pts, strict=True), marker="o", label=name)
        for name, marker in ((LARGE_ONLY, "*"), (SMALL_ONLY, "s")):
            if name in ends:
                ax.scatter([ends[name]["large_share"]], [ends[name][key]], marker=marker, s=120, c="k", label=name,
                           zorder=3)  # fmt: skip
        ax.set_xlabel("large-model token share")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
