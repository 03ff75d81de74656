"""A user's own routing program served by import path (``router.program: "module:ClassName"``): the module is
found from the directory ``tokenrouter serve`` runs in, in the front end and in every worker."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from tests.serve.engine_support import model_dirs
from tests.serve.server_fixtures import API_KEY, MODEL, server_config
from trserve.server.process import ServerProcess

pytestmark = pytest.mark.serve

PROGRAM = '''
from trcore import RoutingProgram
from trcore.step import Routing


class Alternate(RoutingProgram):
    """Hands each request to the next model after every kept token."""

    def route(self, step):
        return Routing([(self.model + 1) % self.num_models] * len(step.token_ids))
'''


def test_a_program_from_the_working_directory_routes_every_request(tmp_path: Path) -> None:
    (tmp_path / "my_routing.py").write_text(PROGRAM)
    config = server_config(model_dirs(), backend="hash")
    config["router"] = {"program": "my_routing:Alternate"}
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(config))
    server = ServerProcess(tmp_path / "serve.yaml")
    try:
        server.launch_on_a_free_port(lambda: server.command, server.env, 120, cwd=tmp_path)
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 8, "temperature": 0}
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}) as client:
            usage = [client.post("/v1/completions", json=body, timeout=60).json()["usage"] for _ in range(3)]
    finally:
        server.stop()
    # The request enters at model 0 and changes model after every token: four tokens each.
    assert [u["tokens_per_model"] for u in usage] == [{"large": 4, "small": 4}] * 3
