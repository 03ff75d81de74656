"""`tokenrouter quality`: answer quality per routing program (a sweep of its parameters against large-only and
small-only) into docs/quality/, operating points by a target accuracy, and `quality build-set` for the held-out
evaluation set."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from tokenrouter.errors import cli_errors, fail

app = typer.Typer(no_args_is_help=False)

PROGRAM_NAMES = ("rstitch", "r2r", "citer", "colllm")
#: Answered at every sweep point and recorded, not scored: the demo's sample question.
DEMO_PROBES = ("What is the capital of France?",)


def _say(line: str) -> None:
    typer.echo(line, err=True)


def _command() -> str:
    return "tokenrouter quality " + " ".join(shlex.quote(a) for a in sys.argv[2:])


@app.callback(invoke_without_command=True)
@cli_errors
def quality(
    ctx: typer.Context,
    program: str = typer.Option(
        ",".join(PROGRAM_NAMES), "--program", "--programs", help=f"Programs to sweep, from {', '.join(PROGRAM_NAMES)}."
    ),
    target_accuracy: float | None = typer.Option(
        None, "--target-accuracy", help="Print the cheapest parameters reaching this accuracy relative to large-only."
    ),
    save_operating_point: bool = typer.Option(
        False, "--save-operating-point", help="With --target-accuracy: store the point in the operating points file."
    ),
    from_json: Path | None = typer.Option(None, "--from", help="Pick operating points from this results JSON."),
    probe_contains: str | None = typer.Option(
        None,
        "--probe-contains",
        help="With --target-accuracy: the point's answer to the demo question must contain this.",
    ),
    points: str = typer.Option("", "--points", help="Extra points: 'rstitch:tau=1,tau_back=0;r2r:threshold=0.3'."),
    eval_set: Path | None = typer.Option(
        None, "--eval-set", help="Questions (JSONL) (default: the packaged eval_qa.jsonl)."
    ),
    num_questions: int | None = typer.Option(None, "--questions", help="Use only the first N questions."),
    max_tokens: int = typer.Option(24, "--max-tokens", help="Output tokens per answer at most (greedy)."),
    concurrency: int = typer.Option(16, "--concurrency", help="Requests in flight."),
    out: Path | None = typer.Option(
        None, "--out", help="Output folder (default: docs/quality for every program, else ./quality-<programs>)."
    ),
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the pair's."),
    pair: str = typer.Option("local-smollm2", "--pair", help="Model pair measured; its operating points file."),
) -> None:
    """Measure answer quality against the large model's share for each routing program."""
    if ctx.invoked_subcommand is not None:
        return
    import json

    from tokenrouter.commands.serve import _load
    from trserve.quality.evalset import EVAL_SET, load_questions
    from trserve.quality.report import write_outputs
    from trserve.quality.run import measure_quality
    from trserve.quality.sweep import grid_points, parse_points

    programs = [p.strip() for p in program.split(",") if p.strip()]
    for name in programs:
        if name not in PROGRAM_NAMES:
            fail(f"--program: unknown program {name!r}; valid: {', '.join(PROGRAM_NAMES)}")
    _check(target_accuracy, save_operating_point, max_tokens, concurrency, num_questions)
    from tokenrouter.options import check_pair

    check_pair(pair)
    if from_json is not None:
        if target_accuracy is None:
            fail("--from: needs --target-accuracy (it only picks operating points from existing results)")
        doc = json.loads(from_json.read_text())
    else:
        path = eval_set or EVAL_SET
        questions = load_questions(path)[:num_questions]
        cfg = _load(config, None, None, pair=pair)
        swept = sorted(grid_points(programs) + parse_points(points), key=lambda p: (programs.index(p.program)
                       if p.program in programs else len(programs), sorted(p.params.items())))  # fmt: skip
        doc = measure_quality(cfg, questions, swept, max_tokens=max_tokens, concurrency=concurrency,
                              command=_command(), progress=_say, eval_set=path, probes=DEMO_PROBES)  # fmt: skip
        # Only the full sweep replaces the committed results; a partial one goes to ./quality-<programs>/.
        default_out = _docs_dir() if programs == list(PROGRAM_NAMES) else Path("quality-" + "-".join(programs))
        written = write_outputs(doc, out or default_out)
        typer.echo("wrote " + ", ".join(str(p) for p in written))
    if target_accuracy is not None:
        _pick(doc, programs, target_accuracy, save_operating_point, probe_contains, pair)


def _check(target: float | None, save: bool, max_tokens: int, concurrency: int, num_questions: int | None) -> None:
    if target is not None and not 0 < target <= 2:
        fail(f"--target-accuracy: a fraction of large-only's accuracy in (0, 2], got {target}")
    if save and target is None:
        fail("--save-operating-point: needs --target-accuracy")
    for key, value in {"--max-tokens": max_tokens, "--concurrency": concurrency}.items():
        if value < 1:
            fail(f"{key}: must be >= 1, got {value}")
    if num_questions is not None and num_questions < 1:
        fail(f"--questions: must be >= 1, got {num_questions}")


def _pick(doc: dict, programs: list[str], target: float, save: bool, probe: str | None, pair: str) -> None:  # type: ignore[type-arg]
    from trserve.paths import pair_dir
    from trserve.quality.report import cheapest, operating_point
    from trserve.quality.run import save_operating_point
    from trsim.pairs import load_pair

    points_file = load_pair(pair).operating_points_path() or pair_dir(pair) / "operating_points.json"

    for name in programs:
        row = cheapest(doc["rows"], name, target, probe)
        if row is None:
            also = f" with {probe!r} in the demo answer" if probe else ""
            typer.echo(f"{name}: no swept parameters reach {target:.0%} of large-only's accuracy{also}")
            continue
        point = operating_point(row, target, doc["command"])
        point["probe_answers"] = row.get("probe_answers", {})
        point["pair"] = pair
        typer.echo(
            f"{name}: {point['params']} reaches {point['relative_accuracy']:.1%} of large-only's accuracy "
            f"(accuracy {point['accuracy']:.1%}) with {point['large_share']:.1%} of the tokens on the large model"
        )
        if save:
            save_operating_point(point, points_file)
            typer.echo(f"saved to {points_file}")


def _docs_dir() -> Path:
    from trserve.paths import repo_root

    root = repo_root()
    return (root / "docs" / "quality") if root is not None else Path("quality")


@app.command("build-set")
@cli_errors
def build_set(
    candidates: Path | None = typer.Option(
        None, "--candidates", help="Candidate questions (default: eval_qa_candidates.jsonl)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Where the kept questions go (default: the packaged eval_qa.jsonl)."
    ),
    max_tokens: int = typer.Option(24, "--max-tokens", help="Output tokens per answer at most (greedy)."),
    concurrency: int = typer.Option(16, "--concurrency", help="Requests in flight."),
) -> None:
    """Keep the candidates the large model alone answers right and that no training prompt repeats."""
    from tokenrouter.commands.serve import _load
    from trserve.quality.evalset import CANDIDATES, EVAL_SET, load_questions, write_questions
    from trserve.quality.run import build_set as run_build

    result = run_build(_load(None, None, None), load_questions(candidates or CANDIDATES), max_tokens, concurrency)
    write_questions(result.kept, out or EVAL_SET)
    typer.echo(
        f"build-set: {result.num_candidates} candidates, {result.num_overlap} dropped as training prompts, "
        f"{result.num_wrong} dropped as answered wrong by the large model, {len(result.kept)} kept -> "
        f"{out or EVAL_SET}"
    )
