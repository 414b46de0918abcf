"""Connection reuse against a real Guard, through a TCP relay that counts
the connections and can break them all (what a Guard restart does to them)."""

from __future__ import annotations

import socket
import threading
import unittest
from typing import List
from urllib.parse import urlsplit

from guard_sdk import Client
from tests.guard_server import KEY_CHECK, TEST_TIMEOUT, GuardTestCase


class Relay:
    """Forwards 127.0.0.1:<port> to Guard, byte for byte, and counts accepted connections."""

    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.connections = 0
        self.lock = threading.Lock()
        self.open: List[socket.socket] = []
        self.ln = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.ln.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.ln.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)  # type: ignore[arg-type]
            with self.lock:
                self.connections += 1
                self.open += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def break_all(self) -> None:
        with self.lock:
            socks, self.open = self.open, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.ln.close()
        self.break_all()


class PoolEndToEnd(GuardTestCase):
    def test_checks_reuse_one_connection_and_survive_a_broken_one(self) -> None:
        relay = Relay(self.guard.url)
        self.addCleanup(relay.close)
        c = Client(relay.url, KEY_CHECK, timeout=TEST_TIMEOUT, retries=0)
        self.addCleanup(c.close)
        for i in range(20):
            res = c.check("login", ip="198.51.100.20")
            self.assertIn(f'"login/ip";r={59 - i};', res.rate_limit)
        c.report("login", "success", ip="198.51.100.20", decision_id=res.decision_id)
        self.assertEqual(relay.connections, 1)

        relay.break_all()  # as a Guard restart would; the pooled connection is dead
        res = c.check("login", ip="198.51.100.20")
        self.assertIn('"login/ip";r=39;', res.rate_limit, "counted once: not sent on the dead connection")
        self.assertEqual(relay.connections, 2)


if __name__ == "__main__":
    unittest.main()
