"""A serve config's values are strict: a value of another type is one line naming the field (exit 2), not a
coercion; a value that fits no member of a union names what each member wants; the engines' seed stays in the
range vLLM seeds numpy with."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from tokenrouter.cli import app

EMULATED = {"backend": "emulated", "models": [{"name": "small", "emulated": {"latency_ms": 1.0}}]}


def print_config(tmp_path, override: dict) -> tuple[int, str]:
    """``serve --print-config`` of the emulated config with ``override`` merged into one section (or the top)."""
    data = yaml.safe_load(yaml.safe_dump(EMULATED))
    for key, value in override.items():
        section, _, field = key.rpartition(".")
        target = data
        for part in section.split(".") if section else ():
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        target[field] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--print-config"])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"models.0.max_num_seqs": True}, "models.0.max_num_seqs: Input should be a valid integer"),
        ({"models.0.max_num_seqs": "8"}, "models.0.max_num_seqs: Input should be a valid integer"),
        ({"models.0.max_num_seqs": 8.0}, "models.0.max_num_seqs: Input should be a valid integer"),
        ({"server.port": "8000"}, "server.port: Input should be a valid integer"),
        ({"batching.max_wait_ms": True}, "batching.max_wait_ms: Input should be a valid number"),
        ({"models.0.kv_cache_gib": "1.5"}, "models.0.kv_cache_gib: Input should be a valid number"),
        ({"server.restart.enabled": "yes"}, "server.restart.enabled: Input should be a valid boolean"),
        ({"server.kv_admission": 1}, "server.kv_admission: Input should be a valid boolean"),
        ({"batching.thresholds": [True]}, "batching.thresholds.0: Input should be a valid integer"),
    ],
)
def test_a_value_of_another_type_is_refused_not_converted(tmp_path, override, words):
    code, output = print_config(tmp_path, override)
    assert code == 2 and output.strip() == f"error: {words}", output


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"batching.thresholds": "autoo"}, "batching.thresholds: Input should be a valid list or 'auto' or 'adaptive'"),
        ({"models.0.emulated": {"latency_ms": "6"}}, "models.0.emulated.latency_ms: Input should be a valid number or"),
    ],
)
def test_a_value_no_member_of_a_union_takes_names_every_members_want(tmp_path, override, words):
    code, output = print_config(tmp_path, override)
    assert code == 2 and output.strip().startswith(f"error: {words}"), output


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_vllm_cannot_seed_numpy_with_is_refused(tmp_path, seed):
    code, output = print_config(tmp_path, {"seed": seed})
    assert code == 2 and output.startswith("error: seed: Input should be"), output


def test_tables_read_back_from_print_config_keep_their_active_counts(tmp_path):
    code, output = print_config(tmp_path, {"batching.thresholds": [2], "batching.tables": [{4: 3}]})
    assert code == 0, output
    path = tmp_path / "printed.yaml"
    path.write_text(output)
    again = CliRunner().invoke(app, ["serve", "--config", str(path), "--print-config"])
    assert again.exit_code == 0 and again.output == output, again.output


def test_a_config_that_is_not_utf8_text_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff\xfemodels: []\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--print-config"])
    expected = f"error: config: {path}: not UTF-8 text (invalid start byte at byte 0)"
    assert result.exit_code == 2 and result.output.strip() == expected, result.output


@pytest.mark.parametrize(("router", "field"), [(5, "router"), ({"program": "markov", "params": 5}, "router.params")])
def test_a_pair_config_whose_router_is_no_mapping_names_it(tmp_path, router, field):
    """The pair's fill reads the router section before validation: it used to raise TypeError there."""
    config = {"pair": "r2r-qwen-1.5b-32b", "backend": "emulated", "models": [{"name": "small"}], "router": router}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--print-config"])
    assert result.exit_code == 2 and result.output.startswith(f"error: {field}: Input should be a valid dict"), (
        result.output
    )


def test_a_number_in_exponent_form_is_a_number(tmp_path):
    """PyYAML's YAML 1.1 reads 6e2 as text; strict values would refuse it (trsim.yaml_text reads it as 600.0)."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(EMULATED) + "server: {startup_timeout_s: 6e2, stall_timeout_s: 1.5E+2}\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--print-config"])
    assert result.exit_code == 0, result.output
    server = yaml.safe_load(result.output)["server"]
    assert server["startup_timeout_s"] == 600.0 and server["stall_timeout_s"] == 150.0


def test_a_key_given_twice_is_refused_not_the_last_one_kept(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(EMULATED) + "server: {port: 9000}\nserver: {host: 127.0.0.1}\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--print-config"])
    assert result.exit_code == 2 and "key 'server' given twice in one mapping" in result.output, result.output


@pytest.mark.parametrize(("make", "words"), [("file", "is a file, not a folder"), ("under-a-file", "cannot make")])
def test_a_log_dir_that_cannot_be_made_names_the_field_and_leaves_no_run_dir(tmp_path, monkeypatch, make, words):
    """It was the OSError's bare path ('error: /etc/passwd: File exists') and left the run directory behind."""
    import tempfile

    runs = tmp_path / "tmp"
    runs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    (tmp_path / "taken").write_text("a file")
    log_dir = tmp_path / "taken" if make == "file" else tmp_path / "taken" / "logs"
    data = {**EMULATED, "server": {"log_dir": str(log_dir)}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--port", "0"])
    assert result.exit_code == 2 and result.output.startswith("error: server.log_dir: "), result.output
    assert words in result.output and str(log_dir) in result.output, result.output
    assert list(runs.iterdir()) == []  # no run directory left behind
