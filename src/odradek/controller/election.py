"""Controller election through ZooKeeper (Kafka's ZookeeperLeaderElector, with Kafka 1.1+'s epoch
fencing).

Every broker runs a ControllerElector. The one whose transaction creates the ephemeral
/controller (and bumps /controller_epoch in the same multi) is the controller until that znode
goes: its session ends, or the znode is deleted. Everyone watches /controller and tries again
when it disappears.

Threads: kazoo delivers watch and session events on its own thread, where nothing may block,
so those callbacks only put a "re-check" marker on this elector's queue. A dedicated elector
thread does the ZooKeeper calls (which may wait out a /controller left by our own previous
session for a few seconds) and calls `on_become` / `on_resign`. Those two callbacks run on the
elector thread and must only enqueue work for the controller's event thread, e.g.
`loop.call_soon_threadsafe(queue.put_nowait, Startup(epoch, zk_version))`: blocking in them
delays the next election. Events mean "go re-read", so duplicates are harmless.
"""
from __future__ import annotations

import enum
import logging
import queue
import threading
from collections.abc import Callable

from kazoo.client import KazooState
from kazoo.exceptions import KazooException

from odradek.zk.client import KafkaZkClient, Watch
from odradek.zk.errors import StaleEphemeralError

log = logging.getLogger(__name__)


class _Signal(enum.Enum):
    CHECK = "check"  # /controller changed or we (re)connected: re-read and maybe elect
    LOST = "lost"  # our session expired: our /controller is gone or going
    STOP = "stop"


class ControllerElector:
    """Elects this broker controller when it can, and says so through two callbacks.

    on_become(epoch, epoch_zk_version) after winning; on_resign() when /controller moves away
    from us, our session is lost, or stop() is called while we are controller. Every
    on_become is followed by exactly one on_resign before the next on_become.
    """

    def __init__(
        self,
        zk: KafkaZkClient,
        broker_id: int,
        on_become: Callable[[int, int], None],
        on_resign: Callable[[], None],
    ) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self._on_become = on_become
        self._on_resign = on_resign
        self._signals: queue.SimpleQueue[_Signal] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"controller-elector-{broker_id}", daemon=True)
        self._watch: Watch | None = None
        self._won: tuple[int, int] | None = None
        self.suspended = False  # connection to ZooKeeper lost, session maybe still alive

    @property
    def is_controller(self) -> bool:
        return self._won is not None

    @property
    def epoch(self) -> tuple[int, int] | None:
        """(controller epoch, /controller_epoch zk version) while we are controller."""
        return self._won

    def start(self) -> None:
        """Start the elector thread; the /controller watch fires at once, so we elect now."""
        self._thread.start()
        self._zk.add_state_listener(self._on_state)
        self._watch = self._zk.watch_controller(lambda _controller_id: self.trigger())

    def trigger(self) -> None:
        """Ask for a re-check, e.g. after the controller caught ControllerMovedError."""
        self._signals.put(_Signal.CHECK)

    def stop(self) -> None:
        """Stop electing; resign if we are controller. The /controller znode itself goes when
        the ZooKeeper session is closed, which is the owner of the client's business."""
        self._zk.remove_state_listener(self._on_state)
        if self._watch is not None:
            self._watch.cancel()
        self._signals.put(_Signal.STOP)
        if self._thread.is_alive():
            self._thread.join()

    # kazoo thread: record and enqueue only -------------------------------------------------

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._signals.put(_Signal.LOST)
        elif state == KazooState.SUSPENDED:
            # Kafka does not resign on a mere disconnect: the session (and /controller) may
            # survive, and fenced writes fail safely if it does not.
            self.suspended = True
        else:  # CONNECTED, possibly with a new session after LOST: look again
            self.suspended = False
            self._signals.put(_Signal.CHECK)

    # elector thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while (signal := self._signals.get()) is not _Signal.STOP:
            if signal is _Signal.LOST:
                log.warning("broker %d: ZooKeeper session lost", self.broker_id)
                self._resign()
                continue
            try:
                self._elect()
            except (KazooException, StaleEphemeralError) as exc:
                # a reconnect (CONNECTED) or the stale znode's deletion (watch) triggers a retry
                log.warning("broker %d: controller election failed: %r", self.broker_id, exc)
        self._resign()

    def _elect(self) -> None:
        current = self._zk.get_controller_id()
        if self._won is not None:
            if current == self.broker_id:
                return
            log.info("broker %d: controller moved to %s", self.broker_id, current)
            self._resign()
        if current is not None and current != self.broker_id:
            return
        # absent, or naming us from an old session (try_become_controller waits that out)
        won = self._zk.try_become_controller(self.broker_id)
        if won is not None:
            self._won = won
            log.info("broker %d: elected controller, epoch %d", self.broker_id, won[0])
            self._on_become(*won)

    def _resign(self) -> None:
        if self._won is not None:
            self._won = None
            self._on_resign()
