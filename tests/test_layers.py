"""The layering of the packages holds: no import cycles, no upward imports, heavy libraries only where allowed.

Every ``import`` statement counts, at module level or inside a function, under ``TYPE_CHECKING`` or not: a
function-local import that dodges a cycle is still a cycle. Layers, lowest first: ``trcore`` <- ``trserve.paths``
<- ``trsim`` <- ``trserve`` <- ``tokenrouter``; inside ``trserve``: engine <- runtime <- frontend <- cluster <-
server <- tools. ``models/`` (the model pairs) is data, no code, found only through ``trserve.paths``.
Ray is imported only where processes are placed on a cluster or simulator jobs sent to one (:data:`RAY_ALLOWED`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trcore", "trsim", "trserve", "tokenrouter")
#: Rank of each layer; a module may import only modules of the same or a lower rank.
LAYERS = {
    "trcore": 0,
    # The one module that knows where files are (models/, the data root, calibration/): below the simulator, which
    # finds shape configs and model pairs through it; it imports nothing from the project but trcore's errors.
    "trserve.paths": 0.5,
    "trsim": 1,
    "trserve.config": 2,
    "trserve.pairs": 2,  # a config's model pair: what it fills in, the start-up check of its artifacts
    "trserve.model_config": 2,
    "trserve.entrypoints": 2,
    "trserve.hardware": 2,
    "trserve.eventloop": 2,
    "trserve.engine": 3,
    "trserve.runtime": 4,
    "trserve.frontend": 5,
    "trserve.cluster": 6,  # where worker processes run: this machine or Ray actors (the launcher's spawners)
    "trserve.server": 7,
    "trserve": 8,  # the tools: calibrate, modelprep, routers, crossval, bench, baselines
    "tokenrouter": 9,
}
HEAVY = ("vllm", "torch", "transformers")
#: Where vllm / torch / transformers may be imported.
HEAVY_ALLOWED = (
    "trserve.engine",
    "trserve.modelprep",
    "trserve.calibrate",
    "trserve.routers",  # router training reads the pair's hidden states with torch
    "trserve.baselines",
    "trserve.bench.direct",  # plain vLLM, the overhead reference
    "trserve.bench.vllm_client",  # vLLM's own benchmark client, run unchanged
    "trserve.quality.score",  # the large model's log-probabilities of routed answers (transformers)
)
#: Where ray may be imported: the cluster room (the server without ``cluster:`` never loads it) and the simulator's
#: Ray job runner (`sweep`/`plan` load it only with --ray-address: tests/sim/test_ray_jobs.py).
RAY_ALLOWED = ("trserve.cluster", "trsim.ray_jobs")
#: Heavy or optional libraries trcore must not import.
CORE_FORBIDDEN = (*HEAVY, "simpy", "matplotlib", "zmq", "fastapi", "pydantic", "yaml", "rich", "typer")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str) -> set[str]:
    """Every module named by an import statement in ``path`` (relative imports resolved against ``name``)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def project_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from pkg import mod`` resolves to ``pkg.mod``)."""
    paths = {module_name(p, root): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        graph[name] = {m for m in imports_of(path, name) if m in paths and m != name}
    return graph


def layer_of(module: str) -> float:
    best = max((key for key in LAYERS if module == key or module.startswith(key + ".")), key=len)
    return LAYERS[best]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the modules, or None (iterative DFS with colours)."""
    colour: dict[str, int] = {}
    for start in sorted(graph):
        if colour.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        colour[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                colour[node] = 2
                stack.pop()
                continue
            nxt = todo.pop()
            if colour.get(nxt) == 1:
                path = [n for n, _ in stack]
                return [*path[path.index(nxt) :], nxt]
            if not colour.get(nxt):
                colour[nxt] = 1
                stack.append((nxt, sorted(graph[nxt])))
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if layer_of(d) > layer_of(m))


def heavy_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            name = module_name(path, root)
            allowed = any(name == a or name.startswith(a + ".") for a in HEAVY_ALLOWED)
            forbidden = CORE_FORBIDDEN if pkg == "trcore" else () if allowed else HEAVY
            bad += [f"{name} -> {m}" for m in imports_of(path, name) if m.split(".")[0] in forbidden]
    return sorted(set(bad))


def ray_imports(root: Path = ROOT) -> list[str]:
    """Imports of ray outside :data:`RAY_ALLOWED`."""
    bad = []
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            name = module_name(path, root)
            if not any(name == a or name.startswith(a + ".") for a in RAY_ALLOWED):
                bad += [f"{name} -> {m}" for m in imports_of(path, name) if m.split(".")[0] == "ray"]
    return sorted(set(bad))


def test_no_import_cycles() -> None:
    assert find_cycle(project_graph()) is None


def test_no_upward_imports() -> None:
    assert upward_imports(project_graph()) == []


def test_heavy_libraries_only_where_allowed() -> None:
    assert heavy_imports() == []


def test_ray_only_where_allowed() -> None:
    assert ray_imports() == []


#: Where model-pair data lived before ``models/`` (issue #25); nothing may name them any more.
OLD_LOCATIONS = ("trsim/data/shapes", "trcore/programs/routers", "trserve/data/operating_points")
#: Folders whose text files are searched for the old locations (history and generated results excluded).
SEARCHED = ("trcore", "trsim", "trserve", "tokenrouter", "tests", "scripts", "benchmarks", "configs", "notebooks",
            "calibration")  # fmt: skip


def test_models_folder_is_data_found_through_paths() -> None:
    from trserve.paths import MODELS_DIR, pair_names

    assert MODELS_DIR == ROOT / "models"
    assert not list(MODELS_DIR.rglob("*.py")), "models/ holds data only; code stays in the packages"
    folders = sorted(p.name for p in MODELS_DIR.iterdir() if p.is_dir() and p.name != "shapes")
    assert folders == pair_names() and {"local-smollm2", "r2r-qwen-1.5b-32b", "qwen3-0.6b-8b"} <= set(folders)
    for pkg in PACKAGES:  # only trserve.paths builds a path to models/ (every other module asks it)
        for path in (ROOT / pkg).rglob("*.py"):
            if path != ROOT / "trserve" / "paths.py":
                assert '/ "models"' not in path.read_text(), f"{path}: ask trserve.paths where models/ is"


def test_nothing_names_the_old_locations() -> None:
    this = Path(__file__).resolve()
    for folder in SEARCHED:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".yaml", ".sh", ".ipynb", ".toml") and path.resolve() != this:
                text = path.read_text()
                assert not [old for old in OLD_LOCATIONS if old in text], f"{path} names an old location"
    for old in OLD_LOCATIONS:
        assert not list(ROOT.glob(old + "*")), f"{old} still exists"


def test_trserve_top_level_is_small() -> None:
    assert len(list((ROOT / "trserve").glob("*.py"))) <= 8


@pytest.fixture
def fake_tree(tmp_path: Path) -> Path:
    for rel, text in {
        "trcore/__init__.py": "",
        "trcore/a.py": "def f():\n    from trcore import b\n",
        "trcore/b.py": "from trcore.a import f\n",
        "trserve/__init__.py": "",
        "trserve/engine/__init__.py": "",
        "trserve/engine/x.py": "from trserve.frontend.y import z\nimport vllm\n",
        "trserve/frontend/__init__.py": "",
        "trserve/frontend/y.py": "import torch\nz = 1\n",
        "trsim/ray_jobs.py": "import ray\n",
        "trsim/sweep.py": "def f():\n    from ray import remote\n",
        "trsim/__init__.py": "",
        "tokenrouter/__init__.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_checks_catch_a_cycle_an_upward_and_a_heavy_import(fake_tree: Path) -> None:
    graph = project_graph(fake_tree)
    assert find_cycle(graph) in (["trcore.a", "trcore.b", "trcore.a"], ["trcore.b", "trcore.a", "trcore.b"])
    assert upward_imports(graph) == ["trserve.engine.x -> trserve.frontend.y"]
    assert heavy_imports(fake_tree) == ["trserve.frontend.y -> torch"]
    assert ray_imports(fake_tree) == ["trsim.sweep -> ray", "trsim.sweep -> ray.remote"]


def main_guarded_modules(root: Path = ROOT) -> set[str]:
    """Modules with an ``if __name__ == "__main__":`` block (the ones meant to run with ``python -m``)."""
    found = set()
    for path in (root / "trserve").rglob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body):
            found.add(module_name(path, root))
    return found


def test_every_worker_entry_point_is_in_the_one_table() -> None:
    from trserve.entrypoints import WORKERS

    assert main_guarded_modules() == {m for m in WORKERS.values() if m.startswith("trserve.")}
    for path in (ROOT / "trserve").rglob("*.py"):
        if path.name != "entrypoints.py":
            assert '"-m"' not in path.read_text(), f"{path}: start workers through trserve.entrypoints"


def function_local_project_imports(root: Path = ROOT) -> list[str]:
    """Imports of project modules inside functions or under ``TYPE_CHECKING`` in ``trserve`` (a type in the wrong
    room, or a cycle being dodged). The CLI (``tokenrouter``) keeps its lazy imports: they keep start-up fast."""
    found = []
    for path in (root / "trserve").rglob("*.py"):
        tree = ast.parse(path.read_text())
        scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        scopes += [n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
        for scope in scopes:
            for node in ast.walk(scope):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    found += [f"{path.relative_to(root)}:{node.lineno}" for n in names if n.split(".")[0] in PACKAGES]
    return found


def test_trserve_imports_project_modules_at_module_level() -> None:
    assert function_local_project_imports() == []


def test_the_server_and_cli_import_no_engine_library() -> None:
    """The front end's process imports the worker module (to validate programs) but never starts an engine: it
    must not pay for, or print the warnings of, importing vLLM, torch or transformers."""
    import subprocess
    import sys

    code = (
        "import sys, tokenrouter.cli, trserve.server.serve; "
        "print(sorted(m for m in ('vllm', 'torch', 'transformers', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
