"""The markdown table ``benchmarks/slo_capacity.py`` writes beside its JSON (planned beside measured capacity,
then every probed rate's latencies beside each prediction's)."""

from __future__ import annotations

from typing import Any


def markdown(doc: dict[str, Any]) -> str:
    """The short table beside the JSON."""
    h, plan, real = doc["headline"], doc["planner"], doc["stack"]
    lines = [f"# SLO capacity: TPOT p99 <= {doc['targets']['tpot_p99_ms']:g} ms, TTFT p99 <= "
             f"{doc['targets']['ttft_p99_ms']:g} ms", "", f"`{doc['command']}` ({doc['started']} - {doc['finished']})",
             "", "| | req/s | bracket |", "|---|---:|---|",
             f"| planner (`max_rate`, roofline) | {plan['max_rate_rps']:.3f} | {_pair(plan['rate_bracket_rps'])} |",
             f"| planner on the profiles' fits | {h['planner_on_profile_fits_rps']:.3f} | "
             f"{_pair(doc['predicted']['planner_on_profile_fits']['bracket_rps'])} |",
             f"| planner calibrated (`--profile`, `--stack`) | {h['planner_calibrated_rps']:.3f} | "
             f"{_pair(doc['predicted']['planner_calibrated']['rate_bracket_rps'])} |",
             f"| real stack (emulated engines) | {real['max_rate_rps']:.3f} | {_pair(real['rate_bracket_rps'])} |",
             "", f"planned / measured: roofline {_num(h['ratio'])} (target within {doc['targets']['tolerance']:.0%}: "
             f"**{'met' if h['target_met'] else 'missed'}**); calibrated {_num(h['calibrated_ratio'])} "
             f"(**{'met' if h['calibrated_target_met'] else 'missed'}**)", "",
             "| rate req/s | measured TPOT / TTFT p99 ms | backlog (limit) | finished | met | planner TPOT / TTFT "
             "p99 ms | met | profile fits TPOT / TTFT p99 ms | met | calibrated TPOT / TTFT p99 ms | met |",
             "|---:|---|---|---:|---|---|---|---|---|---|---|"]  # fmt: skip
    pred = doc["predicted"]
    rows = zip(real["probes"], pred["planner_at_rates"], pred["profile_fits_at_rates"], pred["calibrated_at_rates"],
               strict=True)  # fmt: skip
    for row, p, f, c in rows:
        lines.append(f"| {row['rate_rps']:.3f} | {_num(row['tpot_p99_ms'])} / {_num(row['ttft_p99_ms'])} | "
                     f"{row['backlog']} ({_num(row['backlog_limit'])}) | {row['num_finished']} | "
                     f"{_yes(row['meets'])} | {_num(p['tpot_p99_ms'])} / {_num(p['ttft_p99_ms'])} | "
                     f"{_yes(p['meets_slo'])} | {_num(f['tpot_p99_ms'])} / {_num(f['ttft_p99_ms'])} | "
                     f"{_yes(f['meets_slo'])} | {_num(c['tpot_p99_ms'])} / {_num(c['ttft_p99_ms'])} | "
                     f"{_yes(c['meets_slo'])} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _pair(xs: list[float]) -> str:
    return f"{xs[0]:.3f}-{xs[1]:.3f}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"
