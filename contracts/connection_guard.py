"""Bounds on a threaded HTTP listener that anything on its network can reach (the agent's metrics endpoint, the
pod's node-copy endpoint): at most `limit` connections at once, a thread each; every connection closed once its
deadline passes, whatever the peer does (a socket timeout bounds each silence, not a peer that sends or reads one
byte at a time); and, when every slot is taken, the connection that has waited longest for its request (at least
EVICT_AFTER_SECONDS: a client sends its request as soon as it connects) gives its slot to the newcomer, so silent
connections cannot lock requests out.

Standard library only: the serving image runs it from the pod's ConfigMap, beside the node-copy endpoint.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from socketserver import BaseServer, ThreadingMixIn

EVICT_AFTER_SECONDS = 1.0


class ConnectionGuard:
    def __init__(self, limit: int, *, tick: float = 0.2) -> None:
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._due: dict[socket.socket, float] = {}  # connection -> when it is closed
        self._waiting: dict[socket.socket, float] = {}  # connections between requests -> since when
        self._tick = tick
        self._closer_pid: int | None = None  # the process whose thread closes overdue connections

    def _ensure_closer(self) -> None:
        """The thread that enforces the deadlines, in the process that serves: a server built before a fork (the
        entry step's endpoint) serves in the child, which has none of the parent's threads, and whose copy of the
        lock may have been taken at the fork."""
        if self._closer_pid == os.getpid():
            return
        self._lock = threading.Lock()
        self._closer_pid = os.getpid()
        threading.Thread(target=self._close_overdue, name="connection-deadlines", daemon=True).start()

    def admit(self, connection: socket.socket, *, head_seconds: float) -> bool:
        """A slot for a new connection, which must send its request within `head_seconds`; False past the cap
        when no connection is waiting to give its slot up."""
        self._ensure_closer()
        if not self._slots.acquire(blocking=False):
            with self._lock:
                oldest = min(self._waiting, key=self._waiting.__getitem__, default=None)
                if oldest is not None and time.monotonic() - self._waiting[oldest] < EVICT_AFTER_SECONDS:
                    oldest = None
                if oldest is not None:
                    self._close(oldest)
            if oldest is None or not self._slots.acquire(timeout=1):
                return False
        self.waiting(connection, seconds=head_seconds)
        return True

    def waiting(self, connection: socket.socket, *, seconds: float) -> None:
        """The connection waits for a request, for at most `seconds`."""
        with self._lock:
            self._waiting[connection] = time.monotonic()
            self._due[connection] = time.monotonic() + seconds

    def serving(self, connection: socket.socket, *, seconds: float) -> None:
        """A request came: the connection is served, for at most `seconds` more."""
        with self._lock:
            self._waiting.pop(connection, None)
            self._due[connection] = time.monotonic() + seconds

    def release(self, connection: socket.socket) -> None:
        with self._lock:
            self._waiting.pop(connection, None)
            self._due.pop(connection, None)
        self._slots.release()

    def _close(self, connection: socket.socket) -> None:
        """Ends the connection (its thread's blocked read or write returns) and forgets it; the lock is held."""
        self._waiting.pop(connection, None)
        self._due.pop(connection, None)
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by its thread

    def _close_overdue(self) -> None:
        while True:
            time.sleep(self._tick)
            now = time.monotonic()
            with self._lock:
                for connection in [c for c, due in self._due.items() if due <= now]:
                    self._close(connection)


class GuardedThreadingMixIn(ThreadingMixIn, BaseServer):
    """A thread per connection within the guard's bounds; past them `busy_reply` is sent and the connection
    closed without a thread. Subclasses set `guard`, `head_seconds` and `busy_reply`."""

    daemon_threads = True
    guard: ConnectionGuard
    head_seconds: float
    busy_reply: bytes

    def process_request(self, request, client_address) -> None:
        if not self.guard.admit(request, head_seconds=self.head_seconds):
            try:
                request.settimeout(1)
                request.sendall(self.busy_reply)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.guard.release(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.guard.release(request)


class GuardedRequestHandler(BaseHTTPRequestHandler):
    """Once a request's head is read, its connection is served for `serving_seconds` (until then it waits, and may
    give its slot up to a newcomer)."""

    server: GuardedThreadingMixIn
    serving_seconds: float

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:
            self.server.guard.serving(self.connection, seconds=self.serving_seconds)
        return parsed
