"""KV-cache memory on one model: the block budget, each resident request's footprint, and the paired questions
and actions a scheduler asks of them (nano-vllm's ``can_allocate`` / ``allocate`` style).

A request's footprint on a model is the KV of the tokens that model has consumed, rounded up to whole blocks.
A step that feeds ``n`` context tokens (prompt, hand-off suffix, its own last token) needs ``blocks_for(n)``
blocks for the request after it; a spilled session holds none and must be recomputed on its next step.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from trcore.errors import ConfigError


@dataclass(frozen=True)
class KVBudget:
    """One model's KV cache: ``num_blocks`` blocks of ``block_size`` tokens, and at most ``max_seqs`` requests
    holding KV at once (vLLM's ``max_num_seqs``: parked sessions count), None for no limit."""

    num_blocks: int
    block_size: int = 16
    max_seqs: int | None = None

    def __post_init__(self) -> None:
        if not _whole(self.num_blocks) or self.num_blocks < 1:
            raise ConfigError("kv.num_blocks", f"must be a whole number, at least 1; got {self.num_blocks!r}")
        if not _whole(self.block_size) or self.block_size < 1:
            raise ConfigError("kv.block_size", f"must be a whole number, at least 1; got {self.block_size!r}")
        if self.max_seqs is not None and (not _whole(self.max_seqs) or self.max_seqs < 1):
            raise ConfigError("kv.max_seqs", f"must be a whole number, at least 1, or None; got {self.max_seqs!r}")

    @classmethod
    def from_tokens(cls, capacity_tokens: int, block_size: int = 16, max_seqs: int | None = None) -> KVBudget:
        """The budget of a cache that holds ``capacity_tokens`` tokens: its whole blocks, at least one (a cache
        smaller than one block is a ConfigError, not rounded up)."""
        if not _whole(block_size) or block_size < 1:
            raise ConfigError("kv.block_size", f"must be a whole number, at least 1; got {block_size!r}")
        if not capacity_tokens >= block_size:  # NaN too
            raise ConfigError("kv.capacity_tokens", f"must hold one block ({block_size} tokens); got {capacity_tokens}")
        return cls(int(capacity_tokens // block_size), block_size, max_seqs)

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks holding ``num_tokens`` tokens of context."""
        return -(-num_tokens // self.block_size)


class KVLedger:
    """Blocks held by each resident request of one model, against its :class:`KVBudget`.

    Questions (``can_*``) never change anything; actions (``reserve``, ``free``) do, and ``reserve`` refuses what
    the question would have refused, so a driver cannot overcommit by mistake."""

    def __init__(self, budget: KVBudget) -> None:
        self.budget = budget
        self._blocks: dict[str, int] = {}
        self.num_used = 0

    @property
    def num_free(self) -> int:
        return self.budget.num_blocks - self.num_used

    @property
    def num_seqs(self) -> int:
        return len(self._blocks)

    def blocks_of(self, request_id: str) -> int:
        """Blocks ``request_id`` holds now (0 when it holds none)."""
        return self._blocks.get(request_id, 0)

    def holds(self, request_id: str) -> bool:
        return request_id in self._blocks

    def extra_blocks(self, request_id: str, num_tokens: int) -> int:
        """Blocks ``request_id`` still needs to hold ``num_tokens`` tokens of context."""
        return max(0, self.budget.blocks_for(num_tokens) - self.blocks_of(request_id))

    def fits_ever(self, num_tokens: int) -> bool:
        """Whether a request of ``num_tokens`` tokens fits in the whole cache, everything else freed."""
        return self.budget.blocks_for(num_tokens) <= self.budget.num_blocks

    def can_admit(self, num_tokens: int) -> bool:
        """Whether a request not resident here can take ``num_tokens`` tokens of KV (blocks and a sequence slot)."""
        has_slot = self.budget.max_seqs is None or self.num_seqs < self.budget.max_seqs
        return has_slot and self.budget.blocks_for(num_tokens) <= self.num_free

    def can_reserve(self, request_id: str, num_tokens: int) -> bool:
        """Whether ``request_id`` (resident or not) can grow to ``num_tokens`` tokens of KV now."""
        if request_id not in self._blocks:
            return self.can_admit(num_tokens)
        return self.extra_blocks(request_id, num_tokens) <= self.num_free

    def reserve(self, request_id: str, num_tokens: int) -> int:
        """Grow ``request_id``'s KV to ``num_tokens`` tokens (never shrinks it); returns the blocks added."""
        if not self.can_reserve(request_id, num_tokens):
            raise MemoryError(f"request {request_id}: {num_tokens} tokens do not fit ({self.num_free} blocks free)")
        extra = self.extra_blocks(request_id, num_tokens)
        self._blocks[request_id] = self.blocks_of(request_id) + extra
        self.num_used += extra
        return extra

    def free(self, request_id: str) -> int:
        """Release everything ``request_id`` holds; returns the blocks freed (0 when it held none)."""
        blocks = self._blocks.pop(request_id, 0)
        self.num_used -= blocks
        return blocks


def _whole(x: object) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)
