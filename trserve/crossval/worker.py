"""Crossval's subserver process: the real ``trserve`` subserver loop plus one message, :class:`Reconfigure`.

Cross-validation runs many cells (concurrency x thresholds x router) on the same engines; restarting an engine
per cell would cost tens of seconds each. So between cells the harness sends ``Reconfigure`` (new batching
policy, new routing program, trace recording on or off) and the loop answers with the routing events it
recorded since the previous one. Everything else is ``trserve.runtime.worker`` unchanged.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

from trserve.crossval.messages import Reconfigure, TraceDump
from trserve.runtime import worker as subserver_proc
from trserve.runtime.loop import SubserverLoop
from trserve.runtime.runspec import RunSpec
from trserve.runtime.transport import FRONTEND

log = logging.getLogger(__name__)


class CrossvalLoop(SubserverLoop):
    """The subserver loop that also obeys :class:`Reconfigure`."""

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, Reconfigure):
            self._reconfigure(msg)
        else:
            super()._handle(msg)

    def _reconfigure(self, msg: Reconfigure) -> None:
        sub = self.sub
        events = [tuple(e) for e in sub.trace or ()]
        if msg.policy is not None:
            sub.policy = msg.policy
        if msg.program is not None:
            sub.program = msg.program.create(self.model, sub.program.num_models)
        sub.trace = [] if msg.record_trace else None
        self.mailbox.send(FRONTEND, TraceDump(self.model, msg.token, events, len(sub.requests)))


def run(spec: RunSpec, model: int) -> None:
    """Start model ``model`` as ``trserve.runtime.worker.run`` does, with the reconfigurable loop and every
    routing signal on (the programs change between cells)."""
    subserver_proc.run(spec, model, loop_cls=CrossvalLoop, engine_overrides=subserver_proc.all_signals(spec))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_json")
    parser.add_argument("model", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    subserver_proc._die_with_parent()
    signal.signal(signal.SIGTERM, subserver_proc._exit_on_sigterm)
    run(RunSpec.load(args.run_json), args.model)


if __name__ == "__main__":
    sys.exit(main())
