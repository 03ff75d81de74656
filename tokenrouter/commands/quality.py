"""`tokenrouter quality`: answer quality per routing program (a sweep of its parameters against large-only and
small-only) into docs/quality/, operating points by a target accuracy, and `quality build-set` for the held-out
evaluation set."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from tokenrouter.errors import cli_errors, fail

app = typer.Typer(no_args_is_help=False, rich_markup_mode=None)

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
        None,
        "--out",
        help="Output folder (default: docs/quality for every program on the local pair, else ./quality-<programs>).",
    ),
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the pair's."),
    pair: str | None = typer.Option(
        None, "--pair", help="Model pair measured (its default config, or the pair of --config) [local-smollm2]."
    ),
) -> None:
    """Measure answer quality against the large model's share for each routing program."""
    if ctx.invoked_subcommand is not None:
        return
    from tokenrouter.options import check_pair
    from trserve.quality.checks import load_results, results_pair
    from trserve.quality.report import write_outputs

    programs = _programs(program)
    _check(target_accuracy, save_operating_point, probe_contains, max_tokens, concurrency, num_questions)
    if pair is not None:
        check_pair(pair)
    if from_json is not None:
        if target_accuracy is None:
            fail("--from: needs --target-accuracy (it only picks operating points from existing results)")
        _refuse_unused(ctx)
        doc = load_results(from_json)
        pair = results_pair(doc, from_json, pair, save_operating_point)
    else:
        cfg = _serve_config(config, pair)
        sweep = _sweep_points(cfg, programs, points)
        if save_operating_point:  # refused now, not after the sweep
            _points_file(cfg.pair, "--config" if config else "--pair")
        doc = _measure(cfg, sweep, eval_set, num_questions, max_tokens, concurrency)
        written = write_outputs(doc, out or _default_out(programs, cfg.pair))
        typer.echo("wrote " + ", ".join(str(p) for p in written))
        pair = cfg.pair
    if target_accuracy is not None:
        _pick(doc, programs, target_accuracy, save_operating_point, probe_contains, pair)


def _programs(text: str) -> list[str]:
    programs = [p.strip() for p in text.split(",") if p.strip()]
    if not programs:
        fail(f"--program: names no program (valid: {', '.join(PROGRAM_NAMES)})")
    for name in programs:
        if name not in PROGRAM_NAMES:
            fail(f"--program: unknown program {name!r}; valid: {', '.join(PROGRAM_NAMES)}")
    return programs


def _check(
    target: float | None, save: bool, probe: str | None, max_tokens: int, concurrency: int, num_questions: int | None
) -> None:
    if target is not None and not 0 < target <= 2:
        fail(f"--target-accuracy: a fraction of large-only's accuracy in (0, 2], got {target}")
    for flag, given in {"--save-operating-point": save, "--probe-contains": probe is not None}.items():
        if given and target is None:
            fail(f"{flag}: needs --target-accuracy (it applies to the operating point picked)")
    for key, value in {"--max-tokens": max_tokens, "--concurrency": concurrency}.items():
        if value < 1:
            fail(f"{key}: must be >= 1, got {value}")
    if num_questions is not None and num_questions < 1:
        fail(f"--questions: must be >= 1, got {num_questions}")


#: Options of the sweep that --from (picking from existing results) has no use for.
SWEEP_ONLY = {"config": "--config", "eval_set": "--eval-set", "points": "--points", "out": "--out",
              "max_tokens": "--max-tokens", "concurrency": "--concurrency", "num_questions": "--questions"}  # fmt: skip


def _refuse_unused(ctx: typer.Context) -> None:
    sources = {flag: ctx.get_parameter_source(name) for name, flag in SWEEP_ONLY.items()}
    given = [flag for flag, s in sources.items() if s is not None and s.name not in ("DEFAULT", "DEFAULT_MAP")]
    if given:
        fail(f"--from: picks from existing results and uses no {', '.join(given)} (they set up a sweep); drop them")


def _serve_config(config: Path | None, pair: str | None):  # type: ignore[no-untyped-def]
    """The serve config measured, resolved as `serve` does; a config naming another pair than --pair is refused,
    and so are models without checkpoints."""
    from tokenrouter.commands.serve import _load
    from trcore.errors import ConfigError
    from trserve.quality.checks import check_engines

    cfg = _load(config, None, None, pair=pair if config is None else None)
    if config is not None and pair is not None and pair != cfg.pair:
        if cfg.pair is not None:
            raise ConfigError("--pair", f"{config} serves pair {cfg.pair}, not {pair}; drop one of them")
        cfg = _load(config, None, None, pair=pair)
    check_engines(cfg, "--config" if config else "--pair")
    return cfg


def _sweep_points(cfg, programs: list[str], points: str) -> list:  # type: ignore[no-untyped-def,type-arg]
    """The grid of ``programs`` and the extra ``points``, each program built now (bad parameters refused before
    anything loads), in program order."""
    from trserve.quality.checks import check_points
    from trserve.quality.sweep import grid_points, parse_points

    grid, extra = grid_points(programs), parse_points(points)
    check_points(grid, cfg.pair, cfg.num_models, "--program")
    check_points(extra, cfg.pair, cfg.num_models, "--points")
    order = {name: k for k, name in enumerate(programs)}
    return sorted(grid + extra, key=lambda p: (order.get(p.program, len(programs)), sorted(p.params.items())))


def _measure(cfg, sweep, eval_set, num_questions, max_tokens, concurrency) -> dict:  # type: ignore[no-untyped-def,type-arg]
    from trserve.quality.evalset import EVAL_SET, load_questions
    from trserve.quality.run import measure_quality

    path = eval_set or EVAL_SET
    questions = load_questions(path)
    if num_questions is not None and num_questions > len(questions):
        fail(f"--questions: {num_questions} is more than the {len(questions)} questions of {path}")
    return measure_quality(cfg, questions[:num_questions], sweep, max_tokens=max_tokens, concurrency=concurrency,
                           command=_command(), progress=_say, eval_set=path, probes=DEMO_PROBES)  # fmt: skip


def _default_out(programs: list[str], pair: str | None) -> Path:
    """Only the local pair's sweep of every program replaces the committed results (docs/quality/); any other goes
    to ./quality-<programs>/ (./quality-<pair>-<programs>/ for another pair)."""
    from trsim.pairs import LOCAL_PAIR

    if programs == list(PROGRAM_NAMES) and pair == LOCAL_PAIR:
        return _docs_dir()
    return Path("-".join(["quality", *([pair or "nopair"] if pair != LOCAL_PAIR else []), *programs]))


def _points_file(pair: str | None, option: str) -> Path:
    from trserve.quality.checks import operating_points_file

    return operating_points_file(pair, option)


def _pick(doc: dict, programs: list[str], target: float, save: bool, probe: str | None, pair: str | None) -> None:  # type: ignore[type-arg]
    from trserve.quality.report import cheapest, operating_point
    from trserve.quality.run import save_operating_point

    points_file = _points_file(pair, "--save-operating-point") if save else None
    for name in programs:
        row = cheapest(doc["rows"], name, target, probe)
        if row is None:
            swept = any(r["name"] == name for r in doc["rows"])
            also = f" with {probe!r} in the demo answer" if probe else ""
            why = f"no swept parameters reach {target:.0%} of large-only's accuracy{also}" if swept else "not swept"
            typer.echo(f"{name}: {why}")
            continue
        point = operating_point(row, target, doc["command"])
        point["probe_answers"] = row.get("probe_answers", {})
        if pair is not None:
            point["pair"] = pair
        typer.echo(
            f"{name}: {point['params']} reaches {point['relative_accuracy']:.1%} of large-only's accuracy "
            f"(accuracy {point['accuracy']:.1%}) with {point['large_share']:.1%} of the tokens on the large model"
        )
        if points_file is not None:
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
    config: Path | None = typer.Option(None, "--config", "-c", help="Serve config (YAML); default: the pair's."),
    pair: str | None = typer.Option(
        None, "--pair", help="Model pair whose large model filters (its default config, or the pair of --config)."
    ),
) -> None:
    """Keep the candidates the large model alone answers right and that no training prompt repeats."""
    from tokenrouter.options import check_pair
    from trserve.quality.evalset import CANDIDATES, EVAL_SET, load_questions, write_questions
    from trserve.quality.run import build_set as run_build

    _check(None, False, None, max_tokens, concurrency, None)
    if pair is not None:
        check_pair(pair)
    target = out or EVAL_SET
    if not target.parent.is_dir():
        fail(f"--out: {target.parent} is not a folder")
    questions = load_questions(candidates or CANDIDATES, "--candidates")
    result = run_build(_serve_config(config, pair), questions, max_tokens, concurrency)
    write_questions(result.kept, target)
    typer.echo(
        f"build-set: {result.num_candidates} candidates, {result.num_overlap} dropped as training prompts, "
        f"{result.num_wrong} dropped as answered wrong by the large model, {len(result.kept)} kept -> {target}"
    )
