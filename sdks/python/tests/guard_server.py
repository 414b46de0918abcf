"""Starts a real Guard for the tests: $GUARD_BIN, or one built from this
repository's cmd/guard, on a free loopback port with the in-memory stores."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from typing import Callable, Optional, TypeVar

KEY_CHECK, KEY_ADMIN, KEY_AUDIT = "k-check", "k-admin", "k-audit"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

_built: Optional[str] = None


def guard_binary() -> str:
    global _built
    if os.environ.get("GUARD_BIN"):
        return os.environ["GUARD_BIN"]
    if _built is None:
        d = tempfile.mkdtemp(prefix="guard-py-bin-")
        atexit.register(shutil.rmtree, d, True)
        _built = os.path.join(d, "guard")
        subprocess.run(["go", "build", "-o", _built, "./cmd/guard"], cwd=ROOT, check=True)
    return _built


# The timeout of test clients of a real Guard: the SDK's default (0.3 s)
# is a production budget, and a loaded CI machine (a Guard just started,
# the Go tests' processes beside it) can take longer for a call whose
# timing is not what the test is about.
TEST_TIMEOUT = 5.0


class Guard:
    def __init__(self, extra: str = "") -> None:
        self.dir = tempfile.mkdtemp(prefix="guard-py-")
        config = os.path.join(self.dir, "guard.yaml")
        with open(config, "w") as f:
            f.write(f"""listen: 127.0.0.1:0
key_secret: py-test-secret-0123456789abcdef
api_keys:
  - {{name: auth-service, scopes: [check], key: "{KEY_CHECK}"}}
  - {{name: ops, scopes: [admin], key: "{KEY_ADMIN}"}}
  - {{name: secteam, scopes: ["audit:read"], key: "{KEY_AUDIT}"}}
audit: {{flush_interval: 10ms}}
{extra}""")
        self.proc = subprocess.Popen(
            [guard_binary(), "serve", "--config", config, "--log-format", "json"], cwd=self.dir,
            env={"PATH": os.environ.get("PATH", ""), "HOME": self.dir},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        found = threading.Event()
        self.url = ""
        log = []

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                try:
                    d = json.loads(line)
                except ValueError:
                    d = {}
                if d.get("msg") == "guard listening" and not found.is_set():
                    self.url = "http://" + d["addr"]
                    found.set()
                elif not found.is_set():
                    log.append(line)

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not found.wait(20):
            self.stop()
            raise RuntimeError("guard did not start:\n" + "".join(log))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The reader ends at the pipe's end, once the process is gone; then
        # the pipe is closed (else Python warns of an unclosed file).
        self.reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, True)


class GuardTestCase(unittest.TestCase):
    """A TestCase with its own real Guard (cls.guard), started once for the class.

    A class sets CONFIG to start it with another config file's text.
    """

    CONFIG: Optional[str] = None
    guard: "Guard"

    @classmethod
    def setUpClass(cls) -> None:
        cls.guard = Guard(cls.CONFIG) if cls.CONFIG is not None else Guard()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.guard.stop()


T = TypeVar("T")


def eventually(fn: Callable[[], Optional[T]], seconds: float = 5.0) -> Optional[T]:
    """Polls fn until it returns something truthy (audit events land asynchronously)."""
    deadline = time.monotonic() + seconds
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.01)
