"""The active-request counts the subservers' threshold tables key on, sent to them over the ZeroMQ wire.

Subserver process ``p`` sees one count: every active request of the system (one replica of each model), or the
requests pinned to ``p`` (replicas, :class:`trserve.frontend.pinning.Pinning`). The front end is their only
writer: it marks them changed whenever it admits, ends or resumes a request, and one flush per event-loop turn
(scheduled with ``loop.call_soon`` when :meth:`CountPublisher.mark` asks for it) sends
:class:`~trserve.runtime.messages.Active` to each connected process whose count differs from the last one it was
sent. A burst of admissions and ends therefore costs at most one small message per
process per turn, streaming tokens cost none, and a closed loop that admits one request as another ends sends
nothing. A process that (re)connects (its ``Ready``) is sent its current count at once, so a restarted worker
starts right.

A fall of the count must reach a subserver, or a queue below a threshold that is no longer reachable would wait
forever (the deadlock-free clamp, ``trcore.BatchingPolicy.peer_slack``): the message wakes its loop. A rise
reaches it just after the request that caused it (the flush follows the dispatch); a subserver that launches in
between sees the lower count, whose smaller threshold only launches sooner.
"""

from __future__ import annotations

from collections.abc import Sequence

from trserve.runtime.messages import Active
from trserve.runtime.transport import AsyncMailbox


class CountPublisher:
    """Sends processes ``0 .. num_procs - 1`` their counts through ``mailbox``, coalesced per event-loop turn, to
    those it is wired to now (``mailbox.addresses``; a process being restarted gets its count when it reconnects).
    It holds no reference to the front end (a cycle would leave the front end's sockets to the cyclic collector)."""

    def __init__(self, num_procs: int, mailbox: AsyncMailbox) -> None:
        self.num_procs = num_procs
        self.mailbox = mailbox
        #: The count each process was last sent (absent: none since it connected).
        self.sent: dict[int, int] = {}
        self.num_sent = 0
        self._is_due = False

    def mark(self) -> bool:
        """The counts may have changed; True when the caller must schedule :meth:`flush` for the end of this
        event-loop turn (the first mark since the last flush, with processes to send to)."""
        if self.num_procs == 0 or self._is_due:
            return False
        self._is_due = True
        return True

    def connected_to(self, proc: int) -> None:
        """Process ``proc`` (re)connected: it gets its current count with the next flush (mark it too)."""
        self.sent.pop(proc, None)

    def flush(self, counts: Sequence[int]) -> None:
        """Send each wired process its count (``counts[proc]``) if it changed since the last one it was sent."""
        self._is_due = False
        wired = self.mailbox.addresses
        for proc in range(self.num_procs):
            count = counts[proc]
            if proc in wired and self.sent.get(proc) != count:
                self.mailbox.send(proc, Active(count))
                self.sent[proc] = count
                self.num_sent += 1
