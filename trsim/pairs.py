"""Model pairs by name: ``models/<pair>/pair.yaml`` loaded and checked, and the pair's artifacts (shapes, routers,
operating points) found from it. Where ``models/`` is lives in :mod:`trserve.paths`; what a ``pair.yaml`` holds
in :mod:`trsim.pair_schema`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trcore.errors import ConfigError
from trserve.paths import SHAPES_DIR, folders_without_pair_file, pair_dir, pair_names, repo_root
from trsim.pair_identity import DIM_FIELDS
from trsim.pair_schema import Dims, PairSpec
from trsim.shapes import load_shape
from trsim.yaml_text import load_yaml

#: The pair each tool uses when none is named: the local CPU pair (serving) and the paper's (analytic tools).
LOCAL_PAIR = "local-smollm2"
PAPER_PAIR = "r2r-qwen-1.5b-32b"
PAIR_FILE = "pair.yaml"


@dataclass(frozen=True)
class Pair:
    """One loaded pair: its validated ``pair.yaml`` and the folder its relative paths start from."""

    spec: PairSpec
    folder: Path

    @property
    def name(self) -> str:
        return self.spec.name

    def dims(self, model: int) -> Dims:
        """Model ``model``'s dimensions: its recipe's ``dims``, or read from its shape config."""
        entry = self.spec.models[model]
        if entry.dims is not None:
            return entry.dims
        shape = load_shape(str(entry.shape), SHAPES_DIR)
        return Dims(**{key: shape[key] for key in DIM_FIELDS})

    def router_path(self, program: str) -> Path:
        """The weights of this pair's ``program`` router; a pair without one is an error naming those it has."""
        router = self.spec.routers.get(program)
        if router is None:
            have = ", ".join(sorted(self.spec.routers)) or "none"
            raise ConfigError(
                "router", f"pair {self.name} has no {program} router (its routers: {have}); train one with "
                f"`tokenrouter train-routers --pair {self.name}` or pass router=PATH",
            )  # fmt: skip
        return self.folder / router.weights

    def operating_points_path(self) -> Path | None:
        """This pair's operating points file (None: the pair has none)."""
        return None if self.spec.operating_points is None else self.folder / self.spec.operating_points

    def operating_points(self) -> dict[str, Any]:
        """The operating points, keyed by program (empty when the pair has none). Each point must name this pair
        (``tokenrouter quality --save-operating-point`` writes ``"pair"``): one copied with the pair's folder, or
        written without the key, is refused rather than taken as this pair's."""
        path = self.operating_points_path()
        if path is None or not path.is_file():
            return {}
        points = _json_object(path)
        for program, point in points.items():
            problem = _point_problem(point, self.name)
            if problem:
                raise ConfigError("operating_points", f"{path}: the {program} point {problem}")
        return points


def _point_problem(point: object, pair: str) -> str | None:
    """Why ``point`` is not an operating point of ``pair`` (None: it is one)."""
    if not isinstance(point, dict):
        return f"must be a JSON object, got {point!r}"
    if "pair" not in point:
        return f'names no pair; add "pair": "{pair}" if it was measured on pair {pair}'
    return None if point["pair"] == pair else f"was measured on pair {point['pair']}, not {pair}"


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError("operating_points", f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError("operating_points", f"{path}: must be a JSON object keyed by program")
    return data


def describe_pair(pair: Pair) -> dict[str, Any]:
    """What a pair has, each item with its source (``tokenrouter models list``)."""
    spec, tok, here = pair.spec, pair.spec.tokenizer, f"models/{pair.name}"
    points = None
    if spec.operating_points is not None:
        points = {"programs": sorted(pair.operating_points()), "source": f"{here}/{spec.operating_points}"}
    return {
        "name": pair.name,
        "description": spec.description,
        "models": {m.name: m.shape or f"recipe: {(m.recipe or {}).get('kind', 'checkpoint')}" for m in spec.models},
        "tokenizer": {"name": tok.name, "vocab_size": tok.vocab_size, "sha256": tok.sha256, "source": tok.source},
        "routers": {name: f"{here}/{r.weights} (record: {here}/{r.record})" for name, r in spec.routers.items()},
        "operating_points": points,
        "latencies": [
            {"hardware": e.hardware, "ms": e.ms, "batch_sizes": e.batch_sizes, "source": e.source}
            for e in spec.latencies
        ],
        "routing": [{"router": r.router, "P": r.P, "C": r.C, "source": r.source} for r in spec.routing],
        "profiles": spec.profiles,
    }


def load_pair(name: str) -> Pair:
    """Pair ``name``; an unknown name lists the valid ones, a bad ``pair.yaml`` names the file and the field."""
    if name not in pair_names():  # a name, not a path: models/<name>/pair.yaml must exist (no "..", "/", "x/")
        raise unknown_pair(name, "pair")
    return Pair(read_pair_file(pair_dir(name) / PAIR_FILE), pair_dir(name))


def unknown_pair(name: str, field: str) -> ConfigError:
    """The error for a pair name that is not one: the valid names, and what a folder of that name lacks."""
    hint = f"; {pair_dir(name)} holds no {PAIR_FILE}" if name in folders_without_pair_file() else ""
    return ConfigError(field, f"unknown pair {name!r}{hint}; valid: {', '.join(pair_names())}")


def read_pair_file(path: Path) -> PairSpec:
    """A ``pair.yaml`` validated: its name must match its folder, every file it names must exist."""
    try:
        data = load_yaml(path.read_text())  # a SafeLoader: no arbitrary objects; a key given twice refused
        spec = PairSpec.model_validate(data)
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), f"not valid YAML: {' '.join(str(exc).split())}") from None
    except ValidationError as exc:
        raise ConfigError(str(path), _validation_line(exc)) from None
    if spec.name != path.parent.name:
        raise ConfigError(str(path), f"name: {spec.name!r} differs from its folder {path.parent.name!r}")
    _check_files(spec, path)
    return spec


def _validation_line(exc: ValidationError) -> str:
    """The first error as ``field.path: problem``; a check's ConfigError names its field below the error's place,
    and pydantic's ``Value error, `` prefix is dropped."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ())]
    inner = (first.get("ctx") or {}).get("error")
    if isinstance(inner, ConfigError):
        loc, problem = [*loc, *([inner.field] if inner.field else [])], inner.problem
    else:
        problem = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{'.'.join(loc)}: {problem}" if loc else problem


def _check_files(spec: PairSpec, path: Path) -> None:
    named = {f"routers.{p}.{k}": getattr(r, k) for p, r in spec.routers.items() for k in ("weights", "record")}
    if spec.operating_points is not None:
        named["operating_points"] = spec.operating_points
    for field, rel in named.items():
        if not (path.parent / rel).is_file():
            raise ConfigError(str(path), f"{field}: no file {rel!r} in {path.parent}")
    for i, model in enumerate(spec.models):
        if model.shape is not None and not (SHAPES_DIR / f"{model.shape}.json").is_file():
            raise ConfigError(str(path), f"models.{i}.shape: no shape {model.shape!r} in {SHAPES_DIR}")
        if model.shape is not None:
            try:
                vocab = load_shape(model.shape, SHAPES_DIR)["vocab_size"]
            except ConfigError as exc:  # the shape file's own problem, blamed on it and on the field naming it
                raise ConfigError(str(path), f"models.{i}.shape: {exc}") from None
            if spec.tokenizer.vocab_size > vocab:  # a token id the model has no embedding for
                raise ConfigError(str(path), f"tokenizer.vocab_size: {spec.tokenizer.vocab_size} ids, but models.{i}'s "
                                  f"shape {model.shape!r} embeds {vocab}")  # fmt: skip
    root = repo_root()  # profiles are calibration folders of a checkout: an installed package has none to check
    for tag, rel in spec.profiles.items() if root is not None else ():
        if not (root / rel).is_dir():
            raise ConfigError(str(path), f"profiles.{tag}: no folder {rel!r} in {root}")


def all_pairs() -> list[Pair]:
    """Every pair under ``models/``, by name; the first broken one is an error."""
    return [load_pair(name) for name in pair_names()]


def describe_all_pairs() -> tuple[list[dict[str, Any]], list[ConfigError]]:
    """What every pair under ``models/`` has (:func:`describe_pair`), and the error of each pair that does not load
    (a bad ``pair.yaml``, operating points of another pair): one broken pair does not hide the others."""
    described, broken = [], []
    for name in pair_names():
        try:
            described.append(describe_pair(load_pair(name)))
        except ConfigError as exc:
            broken.append(exc)
    broken += [
        ConfigError(str(pair_dir(name)), f"no {PAIR_FILE} in this pair folder") for name in folders_without_pair_file()
    ]
    return described, broken


def pair_of_router(path: Path) -> str | None:
    """The pair a router file belongs to: the one its metadata names (``tokenrouter train-routers`` writes it),
    else the pair whose folder holds it; None when neither tells."""
    from trcore.programs.mlp import MLPRouter

    named = MLPRouter.load(path).meta.get("pair")
    if isinstance(named, dict) and named.get("name"):
        return str(named["name"])
    resolved = Path(path).resolve()
    for name in pair_names():
        if resolved.is_relative_to(pair_dir(name).resolve()):
            return name
    return None


__all__ = [
    "LOCAL_PAIR",
    "PAPER_PAIR",
    "Pair",
    "all_pairs",
    "describe_all_pairs",
    "describe_pair",
    "load_pair",
    "pair_of_router",
    "unknown_pair",
]
