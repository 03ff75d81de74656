"""Cross-validation of the throughput model and the simulator against the real server (``tokenrouter crossval``):
``plan`` (cells), ``worker``/``harness`` (the real runs), ``predict`` (model, simulator), ``report``, ``run``."""
