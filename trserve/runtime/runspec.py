"""A resolved server run (config, model paths, thresholds, placements, addresses), written once by the launcher
and read by every subserver process."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from trcore import BatchingPolicy
from trcore.errors import ConfigError
from trcore.replicas import ReplicaTable
from trserve.config import ServeConfig
from trserve.paths import prepared_model_dir
from trserve.runtime.endpoints import Endpoints
from trserve.runtime.placement import Placement

PREPARED_PREFIX = "prepared:"


def resolve_model_path(path: str, field: str = "models.path") -> str:
    """A checkpoint directory that exists; ``prepared:NAME`` names one made by ``tokenrouter models prepare``."""
    if path.startswith(PREPARED_PREFIX):
        name = path[len(PREPARED_PREFIX) :]
        resolved = prepared_model_dir(name)
        if not (resolved / "config.json").is_file():
            raise ConfigError(field, f"model {name!r} is not prepared ({resolved}); run `tokenrouter models prepare`")
        return str(resolved)
    resolved = Path(path).expanduser()
    if not (resolved / "config.json").is_file():
        raise ConfigError(field, f"{resolved} is not a model checkpoint directory (no config.json)")
    return str(resolved)


@dataclass(frozen=True)
class RunSpec:
    """What a subserver process needs to start model ``i``. ``placements`` and the endpoints' inboxes are per
    process: in the routed mode process ``p`` runs replica ``table.replica_of(p)`` of model ``table.model_of(p)``
    (with one replica of each model, process ``m`` is model ``m``)."""

    config: ServeConfig
    model_paths: tuple[str, ...]
    thresholds: tuple[int, ...]
    placements: tuple[Placement, ...]
    endpoints: Endpoints

    @property
    def table(self) -> ReplicaTable:
        """Process index <-> (model, replica) of the routed mode."""
        return ReplicaTable(self.config.replicas)

    def policy(self, model: int) -> BatchingPolicy:
        """Model ``model``'s delayed-batching policy."""
        batching = self.config.batching
        tables = batching.tables[model] if batching.tables else {}
        max_wait = None if batching.max_wait_ms is None else batching.max_wait_ms / 1000.0
        max_batch = batching.max_batch or self.config.models[model].max_num_seqs
        max_batch = min(max_batch, self.config.models[model].max_num_seqs)
        # Peers' slack keeps the threshold vector deadlock-free as the active count falls (trcore.policies_for).
        peer_slack = sum(b - 1 for m, b in enumerate(self.thresholds) if m != model)
        return BatchingPolicy(self.thresholds[model], tables, max_wait, max_batch, peer_slack)

    def save(self, path: str | Path) -> None:
        """Write the spec as JSON readable only by this user (it holds the run's CURVE secret keys on tcp)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.to_json())

    def to_json(self) -> str:
        """The text :meth:`save` writes and :meth:`load` reads (what a spawner hands to a worker's node)."""
        data = {
            "config": self.config.model_dump(mode="json"),
            "model_paths": list(self.model_paths),
            "thresholds": list(self.thresholds),
            "placements": [asdict(p) for p in self.placements],
            "endpoints": self.endpoints.to_json(),
        }
        return json.dumps(data, indent=1)

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        data = json.loads(Path(path).read_text())
        placements = tuple(
            Placement(tuple(p["cpus"]), None if p["gpus"] is None else tuple(p["gpus"]), p["kv_cache_gib"])
            for p in data["placements"]
        )
        return cls(
            config=ServeConfig.model_validate(data["config"]),
            model_paths=tuple(data["model_paths"]),
            thresholds=tuple(data["thresholds"]),
            placements=placements,
            endpoints=Endpoints.from_json(data["endpoints"]),
        )
