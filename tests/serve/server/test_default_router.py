"""The default config says which router it picked and why, through the caller's report (never silently)."""

from trcore import PROGRAMS
from trserve.server import defaults


def test_default_config_names_its_router():
    lines: list[str] = []
    cfg = defaults.default_config(report=lines.append)
    assert cfg.router.program == "rstitch"
    assert len(lines) == 1 and "router rstitch" in lines[0] and "operating point" in lines[0]


def test_fallback_to_markov_says_why(monkeypatch):
    monkeypatch.setattr(PROGRAMS, "names", lambda: ["markov", "schedule"])
    lines: list[str] = []
    cfg = defaults.default_config(report=lines.append)
    assert cfg.router.program == "markov"
    assert len(lines) == 1 and "instead of rstitch" in lines[0] and "registered: markov, schedule" in lines[0]
