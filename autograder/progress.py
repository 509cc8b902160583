"""Progress of a long step, said through the caller's ``say`` (a progress callback, never ``print`` here):
each finished part of the step is one line with its count, and while none comes a heartbeat line
("A6: reference: still running, 40 s") every :data:`HEARTBEAT_SECONDS`, so a log is never silent for long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

HEARTBEAT_SECONDS = 5.0  # the longest silence while a step runs (the README promises a line every 10 s)


class Heartbeat:
    """``say`` wrapped for one step named ``what``: call it with a line to pass the line on; while it is open
    (``with``, or :meth:`start` to :meth:`stop`), a daemon thread says "<what>: still running, <n> s" whenever
    :data:`HEARTBEAT_SECONDS` passed with no line. Lines are passed on one at a time, from any thread. With
    ``say`` None it says nothing and starts no thread."""

    def __init__(self, say: Callable[[str], None] | None, what: str):
        self.say, self.what = say, what
        self.begun = self.last = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, line: str) -> None:
        if self.say is None:
            return
        with self.lock:
            self.last = time.monotonic()
            self.say(line)

    def touch(self) -> None:
        """Something else was said (a student's result line): the silence starts again from now."""
        with self.lock:
            self.last = time.monotonic()

    def start(self) -> Heartbeat:
        if self.say is not None and self.thread is None:
            self.begun = self.last = time.monotonic()
            self.thread = threading.Thread(target=self._beat, name=f"heartbeat {self.what}", daemon=True)
            self.thread.start()
        return self

    def stop(self) -> None:
        """No heartbeat line after this returns."""
        self.stopped.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    def _beat(self) -> None:
        every = HEARTBEAT_SECONDS
        while not self.stopped.wait(max(0.0, self.last + every - time.monotonic())):
            with self.lock:
                if self.stopped.is_set():
                    return
                now = time.monotonic()
                if now - self.last >= every:
                    self.last = now
                    self.say(f"{self.what}: still running, {now - self.begun:.0f} s")

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
