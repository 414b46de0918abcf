"""Timeouts, retries and failure policies against servers that hang, fail,
answer slowly or drop connections (a broken network path, not a stand-in
for Guard, which test_e2e.py runs for real)."""

from __future__ import annotations

import socket
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List, Optional

from guard_sdk import (AuditPage, CheckResponse, Client, FailurePolicy, GuardError, GuardUnavailableError, Readiness,
                       ReportResponse, TooManyPendingReports, is_unavailable, parse_retry_after)

ANSWER = (b'{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01J","degraded":false,'
          b'"limits":[],"lockout":null}')


class Server:
    """An HTTP server on a free port whose behaviour is handle(handler, call number).

    HTTP/1.0 (a connection per request) unless http11: then connections are
    kept alive, closed by the server after idle_timeout seconds without a
    request when set. It counts the connections it accepted and closed.
    """

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler, int], None], *, http11: bool = False,
                 idle_timeout: Optional[float] = None) -> None:
        self.calls = 0
        self.connections = 0
        self.closed = 0
        self.count_lock = threading.Lock()
        self.release = threading.Event()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if http11 else "HTTP/1.0"
            timeout = idle_timeout

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                with outer.count_lock:
                    outer.calls += 1
                    call = outer.calls
                handle(self, call)

            do_GET = do_POST = do_DELETE = _any

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # clients that gave up (timeouts) break pipes on purpose

            def get_request(self):  # type: ignore[no-untyped-def]
                got = super().get_request()
                with outer.count_lock:
                    outer.connections += 1
                return got

            def shutdown_request(self, request: object) -> None:
                super().shutdown_request(request)  # type: ignore[arg-type]
                with outer.count_lock:
                    outer.closed += 1

        self.httpd = Quiet(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(h: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    for k, v in headers.items():
        h.send_header(k.replace("_", "-"), v)
    h.end_headers()
    h.wfile.write(body)


def hanging() -> Server:
    srv: Server

    def handle(h: BaseHTTPRequestHandler, n: int) -> None:
        srv.release.wait(10)

    srv = Server(handle)
    return srv


def failing(status: int, n_fail: int) -> Server:
    def handle(h: BaseHTTPRequestHandler, n: int) -> None:
        if n <= n_fail:
            reply(h, status, b'{"error":{"code":"unavailable","message":"guard cannot answer right now"}}',
                  Retry_After="7", X_Request_Id="req-1")
        else:
            reply(h, 200, ANSWER if h.path.startswith("/v1/check") else b'{"actions":{},"lists":{}}')
    return Server(handle)


def dropping() -> Server:
    def handle(h: BaseHTTPRequestHandler, n: int) -> None:
        h.connection.shutdown(socket.SHUT_RDWR)
        h.close_connection = True
    return Server(handle)


def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


class Timeouts(unittest.TestCase):
    def test_default_timeout_stops_a_hanging_guard(self) -> None:
        srv = hanging()
        self.addCleanup(srv.close)
        start = time.monotonic()
        with self.assertRaises(Exception) as cm:
            Client(srv.url, "k").check("login", user="alice")
        self.assertTrue(is_unavailable(cm.exception), cm.exception)
        self.assertLess(time.monotonic() - start, 5, "not the default socket timeout")

    def test_slow_guard(self) -> None:
        srv = Server(lambda h, n: (time.sleep(0.15), reply(h, 200, ANSWER)))
        self.addCleanup(srv.close)
        self.assertTrue(Client(srv.url, "k", timeout=5).check("login", user="a").allowed)
        with self.assertRaises(Exception) as cm:
            Client(srv.url, "k", timeout=0.02).check("login", user="a")
        self.assertTrue(is_unavailable(cm.exception))
        self.assertTrue(Client(srv.url, "k", timeout=0).check("login", user="a").allowed)

    def test_deadline_covers_a_guard_that_drips_its_answer(self) -> None:
        # Every byte arrives before a per-read socket timeout would fire; the
        # call's deadline must still hold for the whole answer.
        def handle(h: BaseHTTPRequestHandler, n: int) -> None:
            for c in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                if srv.release.wait(0.05):
                    return
                h.wfile.write(bytes([c]))
                h.wfile.flush()

        srv = Server(handle)
        self.addCleanup(srv.close)
        start = time.monotonic()
        with self.assertRaises(Exception) as cm:
            Client(srv.url, "k", timeout=0.3).check("login", user="a")
        self.assertTrue(is_unavailable(cm.exception), cm.exception)
        self.assertLess(time.monotonic() - start, 1.0, "the deadline bounds the whole call, not each read")


    def test_export_timeout_bounds_each_read(self) -> None:
        # An export streams for as long as the trail is long: its timeout is
        # how long one read may wait, not the whole transfer.
        body = b'{"id":"1"}\n' * 2

        def handle(h: BaseHTTPRequestHandler, n: int) -> None:
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            for c in body:
                time.sleep(0.03)
                h.wfile.write(bytes([c]))
                h.wfile.flush()

        srv = Server(handle)
        self.addCleanup(srv.close)
        self.assertEqual(Client(srv.url, "k").export_audit("ndjson", timeout=0.3), body.decode())

    def test_export_cut_mid_way_is_unavailable(self) -> None:
        # Guard cuts an export whose store fails mid-way: a broken transfer, never a short text.
        def handle(h: BaseHTTPRequestHandler, n: int) -> None:
            h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\nc\r\n" + b'{"id":"1"}\n\n' + b"\r\n")
            h.wfile.flush()
            h.connection.shutdown(socket.SHUT_RDWR)
            h.close_connection = True

        srv = Server(handle)
        self.addCleanup(srv.close)
        with self.assertRaises(GuardUnavailableError):
            Client(srv.url, "k").export_audit("ndjson")

    def test_export_refuses_another_servers_answer(self) -> None:
        # A proxy's sign-in page (or any server at the URL) answers 200 too.
        def handle(h: BaseHTTPRequestHandler, n: int) -> None:
            page = b"<html>sign in</html>"
            h.send_response(200)
            h.send_header("Content-Type", "text/html; charset=utf-8")
            h.send_header("Content-Length", str(len(page)))
            h.end_headers()
            h.wfile.write(page)

        srv = Server(handle)
        self.addCleanup(srv.close)
        with self.assertRaises(GuardError) as cm:
            Client(srv.url, "k").export_audit("csv")
        self.assertEqual((cm.exception.status, cm.exception.code), (200, ""))
        self.assertIn("'text/html; charset=utf-8', not text/csv", cm.exception.message)


class Wire(unittest.TestCase):
    def test_answers_with_fields_a_newer_guard_adds(self) -> None:
        # A field Guard adds to a limit or a lockout must not break checks.
        res = CheckResponse.from_wire({
            "decision": "deny", "reason": "locked_out", "retry_after_ms": 5, "decision_id": "01J", "degraded": False,
            "limits": [{"rule": "login/ip", "dimension": "ip", "limit": 60, "window_ms": 60000, "remaining": 0,
                        "reset_ms": 5, "algorithm": "log", "shadow": True}],
            "lockout": {"dimension": "user", "until": "2026-03-01T12:00:00.000Z", "level": 2, "ledger": "auth"},
            "hint": "new"})
        self.assertEqual((res.limits[0].rule, res.limits[0].remaining), ("login/ip", 0))
        assert res.lockout is not None
        self.assertEqual((res.lockout.level, res.lockout.until), (2, "2026-03-01T12:00:00.000Z"))
        rep = ReportResponse.from_wire({"lockout": {"dimension": "user+ip", "until": "2026-03-01T12:00:00.000Z",
                                                    "level": 1, "ledger": "auth"}})
        assert rep.lockout is not None
        self.assertEqual(rep.lockout.dimension, "user+ip")

    def test_audit_page_and_readiness(self) -> None:
        # Every event field of the contract, nulls as None, a field a newer Guard adds ignored.
        page = AuditPage.from_wire({"events": [{
            "id": "01J", "at": "2026-03-01T12:00:00.000Z", "kind": "admin", "action": "unlock", "decision": None,
            "reason": None, "outcome": None, "user": "bob", "ip": None, "device": None, "phone": None, "rule": None,
            "retry_after_ms": None, "lockout_until": None, "degraded": None, "dry_run": None, "api_key": "ops",
            "decision_id": None, "instance": "guard-1", "note": "ticket 1", "region": "eu"}], "next_cursor": None})
        self.assertEqual(len(page), 1)
        self.assertIsNone(page.next_cursor)
        e = page[0]
        self.assertEqual((e.kind, e.action, e.api_key, e.note, e.decision), ("admin", "unlock", "ops", "ticket 1", None))
        self.assertEqual(AuditPage.from_wire({"events": [], "next_cursor": "c"}).next_cursor, "c")
        r = Readiness.from_wire({"mode": "degraded", "redis": "down", "postgres": "ok", "audit_backlog": 3})
        self.assertEqual((r.mode, r.redis, r.postgres, r.audit_backlog), ("degraded", "down", "ok", 3))


class Retries(unittest.TestCase):
    def test_get_retried_after_5xx(self) -> None:
        srv = failing(503, 2)
        self.addCleanup(srv.close)
        Client(srv.url, "k").policy()
        self.assertEqual(srv.calls, 3)

    def test_get_gives_up_with_the_last_error(self) -> None:
        srv = failing(502, 10)
        self.addCleanup(srv.close)
        with self.assertRaises(GuardError) as cm:
            Client(srv.url, "k", retries=1).policy()
        e = cm.exception
        self.assertEqual((e.status, e.request_id, e.retry_after), (502, "req-1", 7.0))
        self.assertEqual(srv.calls, 2)

    def test_get_not_retried_after_4xx(self) -> None:
        srv = failing(403, 10)
        self.addCleanup(srv.close)
        with self.assertRaises(GuardError):
            Client(srv.url, "k").policy()
        self.assertEqual(srv.calls, 1)

    def test_check_not_retried_after_5xx(self) -> None:
        srv = failing(503, 1)
        self.addCleanup(srv.close)
        with self.assertRaises(GuardError):
            Client(srv.url, "k").check("login", user="a")
        self.assertEqual(srv.calls, 1)

    def test_report_not_retried_after_a_dropped_connection(self) -> None:
        srv = dropping()
        self.addCleanup(srv.close)
        with self.assertRaises(Exception) as cm:
            Client(srv.url, "k").report("login", "failure", user="a")
        self.assertTrue(is_unavailable(cm.exception), cm.exception)
        self.assertEqual(srv.calls, 1)

    def test_get_retried_after_a_dropped_connection(self) -> None:
        srv = dropping()
        self.addCleanup(srv.close)
        with self.assertRaises(Exception) as cm:
            Client(srv.url, "k").ready()
        self.assertTrue(is_unavailable(cm.exception))
        self.assertEqual(srv.calls, 3)


class Health(unittest.TestCase):
    def test_health_is_retried_and_wants_guards_answer(self) -> None:
        srv = dropping()
        self.addCleanup(srv.close)
        with self.assertRaises(Exception) as cm:
            Client(srv.url, "k").health()
        self.assertTrue(is_unavailable(cm.exception))
        self.assertEqual(srv.calls, 3, "a GET is retried")
        other = Server(lambda h, n: reply(h, 200, b'{"healthy":true}'))
        self.addCleanup(other.close)
        with self.assertRaises(GuardError) as ce:
            Client(other.url, "k").health()
        self.assertEqual((ce.exception.status, ce.exception.code), (200, ""))
        self.assertIn("is the URL Guard's?", str(ce.exception))


def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def answer(h: BaseHTTPRequestHandler, n: int) -> None:
    reply(h, 200, ANSWER if h.path.startswith("/v1/check") else b'{"mode":"normal","redis":"ok","postgres":"ok","audit_backlog":0}')


class Pooling(unittest.TestCase):
    """Keep-alive connections, reused, and what happens when the server closes one."""

    def test_sequential_checks_share_one_connection(self) -> None:
        srv = Server(answer, http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5)
        self.addCleanup(c.close)
        for _ in range(20):
            self.assertTrue(c.check("login", user="a").allowed)
        self.assertEqual((srv.calls, srv.connections), (20, 1))

    def test_concurrent_calls_use_at_most_one_connection_each(self) -> None:
        srv = Server(lambda h, n: (time.sleep(0.002), answer(h, n)), http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5)
        self.addCleanup(c.close)
        start = threading.Barrier(8)
        errors: List[BaseException] = []

        def worker() -> None:
            try:
                start.wait()
                for i in range(25):
                    if i % 5 == 4:
                        c.ready()
                    else:
                        self.assertTrue(c.check("login", user="a").allowed)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(srv.calls, 200)
        self.assertLessEqual(srv.connections, 8)
        # And they stay open for the next calls: no new connection.
        before = srv.connections
        for _ in range(10):
            c.check("login", user="a")
        self.assertEqual(srv.connections, before)

    def test_connection_the_server_closed_after_its_answer(self) -> None:
        # HTTP/1.1 without "Connection: close": the client learns of the close
        # only from the socket, and must not send the next check into it.
        def handle(h: BaseHTTPRequestHandler, n: int) -> None:
            answer(h, n)
            h.close_connection = True

        srv = Server(handle, http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5, retries=0)
        self.addCleanup(c.close)
        for i in range(1, 4):
            self.assertTrue(c.check("login", user="a").allowed)
            self.assertTrue(wait_until(lambda: srv.closed == i))
        self.assertEqual((srv.calls, srv.connections), (3, 3))

    def test_connection_closed_after_an_idle_time(self) -> None:
        srv = Server(answer, http11=True, idle_timeout=0.05)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5, retries=0)
        self.addCleanup(c.close)
        self.assertTrue(c.check("login", user="a").allowed)
        self.assertTrue(c.check("login", user="a").allowed)
        self.assertEqual(srv.connections, 1)
        self.assertTrue(wait_until(lambda: srv.closed == 1))
        self.assertTrue(c.check("login", user="a").allowed)
        c.report("login", "success", user="a")
        self.assertEqual((srv.calls, srv.connections), (4, 2))

    def test_idle_connections_older_than_idle_timeout_are_not_reused(self) -> None:
        srv = Server(answer, http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5, idle_timeout=0.05)
        self.addCleanup(c.close)
        c.check("login", user="a")
        time.sleep(0.1)
        c.check("login", user="a")
        self.assertEqual(srv.connections, 2)
        self.assertTrue(wait_until(lambda: srv.closed == 1), "the stale one is closed")

    def test_no_pool(self) -> None:
        srv = Server(answer, http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5, max_idle_connections=0)
        for _ in range(3):
            c.check("login", user="a")
        self.assertEqual(srv.connections, 3)
        self.assertTrue(wait_until(lambda: srv.closed == 3))

    def test_close_closes_idle_connections(self) -> None:
        srv = Server(answer, http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5)
        c.check("login", user="a")
        c.close()
        self.assertTrue(wait_until(lambda: srv.closed == 1))
        c.report_in_background("login", "success", user="a")  # still usable after close
        self.assertTrue(c.flush(5))
        c.check("login", user="a")
        c.close()
        self.assertEqual((srv.calls, srv.connections), (3, 2))

    def test_reused_connection_that_breaks_after_the_request_went_out(self) -> None:
        # The second request on each connection is read and dropped without an
        # answer: what a server that closed the connection just as the request
        # went out looks like. A GET is retried once on a new connection, even
        # with retries=0; a check (POST) may have counted, and is not sent again.
        def handle(h: BaseHTTPRequestHandler, n: int) -> None:
            served = getattr(h, "served", 0) + 1
            setattr(h, "served", served)
            if served == 2:
                h.connection.shutdown(socket.SHUT_RDWR)
                h.close_connection = True
                return
            answer(h, n)

        srv = Server(handle, http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=5, admin_timeout=5, retries=0)
        self.addCleanup(c.close)
        c.ready()
        c.ready()
        self.assertEqual((srv.calls, srv.connections), (3, 2))
        with self.assertRaises(Exception) as cm:
            c.check("login", user="a")
        self.assertTrue(is_unavailable(cm.exception), cm.exception)
        self.assertEqual((srv.calls, srv.connections), (4, 2), "sent once, never again")

    def test_deadline_bounds_a_reused_connection(self) -> None:
        def handle(h: BaseHTTPRequestHandler, n: int) -> None:
            if n == 1:
                return answer(h, n)
            for ch in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                if srv.release.wait(0.05):
                    return
                h.wfile.write(bytes([ch]))
                h.wfile.flush()

        srv = Server(handle, http11=True)
        self.addCleanup(srv.close)
        c = Client(srv.url, "k", timeout=0.3)
        self.addCleanup(c.close)
        c.check("login", user="a")
        start = time.monotonic()
        with self.assertRaises(Exception) as cm:
            c.check("login", user="a")
        self.assertTrue(is_unavailable(cm.exception), cm.exception)
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertEqual(srv.connections, 1)


class FailurePolicies(unittest.TestCase):
    def test_policies(self) -> None:
        hang, fail = hanging(), failing(500, 1000)
        bad = Server(lambda h, n: reply(h, 400, b'{"error":{"code":"invalid_request","message":"bad","field":"ip"}}'))
        for s in (hang, fail, bad):
            self.addCleanup(s.close)
        down = closed_port()
        E, O, C = FailurePolicy.ERROR, FailurePolicy.OPEN, FailurePolicy.CLOSED
        cases = [
            (hang.url, E, None, None), (hang.url, O, None, "allow"), (hang.url, C, None, "deny"),
            (fail.url, O, None, "allow"), (fail.url, C, None, "deny"), (down, O, None, "allow"),
            (down, O, C, "deny"), (fail.url, E, O, "allow"), (fail.url, O, E, None), (bad.url, O, None, None),
        ]
        for url, client_policy, call_policy, want in cases:
            with self.subTest(url=url, client=client_policy, call=call_policy):
                # Only the hanging server needs a short budget; the others
                # must answer within it even on a loaded machine.
                c = Client(url, "k", timeout=0.05 if url == hang.url else 5, failure_policy=client_policy)
                if want is None:
                    with self.assertRaises(Exception):
                        c.check("login", user="a", failure_policy=call_policy)
                    continue
                r = c.check("login", user="a", failure_policy=call_policy)
                self.assertEqual(r.decision, want)
                self.assertTrue(r.bypassed)
                self.assertEqual(r.reason, "guard_unavailable")
                self.assertIsNotNone(r.cause)


    def test_check_answer_without_a_decision(self) -> None:
        # Another server's JSON is no answer of Guard's, like one that is not JSON at all.
        srv = Server(lambda h, n: reply(h, 200, b'{"status":"ok"}'))
        self.addCleanup(srv.close)
        with self.assertRaises(GuardUnavailableError):
            Client(srv.url, "k").check("login", user="a")
        r = Client(srv.url, "k", failure_policy=FailurePolicy.OPEN).check("login", user="a")
        self.assertEqual((r.bypassed, r.decision), (True, "allow"))


class BackgroundReports(unittest.TestCase):
    def test_bounded_and_flushed(self) -> None:
        got = []
        srv = Server(lambda h, n: (time.sleep(0.03), got.append(n), reply(h, 200, b'{"lockout":null}')))
        self.addCleanup(srv.close)
        errors: list = []
        c = Client(srv.url, "k", on_async_error=errors.append, max_pending_reports=1)
        c.report_in_background("login", "success", user="a")
        c.report_in_background("login", "success", user="a")  # over the bound: dropped
        self.assertTrue(c.flush(5))
        c.close()
        self.assertEqual(len(got), 1)
        self.assertEqual(len(errors), 1)
        self.assertIsInstance(errors[0], TooManyPendingReports)

    def test_errors_reach_the_handler(self) -> None:
        errors: list = []
        c = Client(closed_port(), "k", on_async_error=errors.append)
        c.report_in_background("login", "failure", user="a")
        c.close()
        self.assertEqual(len(errors), 1)
        self.assertTrue(is_unavailable(errors[0]))


class Misc(unittest.TestCase):
    def test_parse_retry_after(self) -> None:
        self.assertEqual(parse_retry_after("42"), 42.0)
        self.assertIsNone(parse_retry_after(""))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertEqual(parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", now=5.0), 5.0)

    def test_bad_base_url(self) -> None:
        with self.assertRaises(ValueError):
            Client("not a url", "k")

    def test_key_that_cannot_be_sent(self) -> None:
        # Refused at once, never with the key in the message (http.client's
        # own ValueError, at each call, quoted the whole header).
        for key, agent in (("k-\nsecret", "guard-sdk-python"), ("k-\x00secret", "guard-sdk-python"),
                           ("k-\u20acsecret", "guard-sdk-python"), ("k", "app\r\nX-Evil: 1")):
            with self.subTest(key=key, agent=agent):
                with self.assertRaises(ValueError) as cm:
                    Client("http://127.0.0.1:1", key, user_agent=agent)
                self.assertNotIn("secret", str(cm.exception))
        # White space around the key (a key file's newline) is no part of it.
        seen: List[str] = []
        srv = Server(lambda h, n: (seen.append(h.headers.get("Authorization", "")), reply(h, 200, ANSWER)))
        self.addCleanup(srv.close)
        c = Client(srv.url, " k-check\r\n", timeout=5)
        self.addCleanup(c.close)
        self.assertFalse(c.check("login", user="a", failure_policy=FailurePolicy.CLOSED).bypassed)
        self.assertEqual(seen, ["Bearer k-check"])


if __name__ == "__main__":
    unittest.main()
