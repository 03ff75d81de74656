"""Baselines on real engines, selectable with ``mode:`` in the serve config: ``lockstep`` and ``per-token``."""
