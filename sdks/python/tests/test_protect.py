"""The request helper behind a WSGI app, against a real Guard."""

from __future__ import annotations

import json
import threading
import unittest
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Sequence
from wsgiref.simple_server import WSGIRequestHandler, make_server

from guard_sdk import (Client, FailurePolicy, IPExtractor, Protector, Request, asgi_request, denial_message,
                       wsgi_request)
from guard_sdk._types import CheckResponse
from tests.guard_server import KEY_CHECK, TEST_TIMEOUT, GuardTestCase
from tests.test_client import hanging


class Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def login_app(protector: Protector, seen: List[Any]) -> Callable:
    def app(environ: Dict[str, Any], start_response: Callable) -> List[bytes]:
        n = int(environ.get("CONTENT_LENGTH") or 0)
        form = urllib.parse.parse_qs(environ["wsgi.input"].read(n).decode())
        email = form.get("email", [""])[0]
        verdict = protector.check(wsgi_request(environ), user=email)
        if not verdict.allowed:
            start_response(verdict.status_line, verdict.headers)
            return [verdict.body]
        assert verdict.attempt is not None
        seen.append(verdict.attempt)
        ok = form.get("ok", [""])[0] == "1"
        verdict.attempt.report("success" if ok else "failure")
        start_response("204 No Content", [])
        return []
    return app


def serve(app: Callable) -> tuple:
    httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", httpd


def post(url: str, form: Dict[str, str], headers: Dict[str, str] = {}) -> tuple:
    req = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class ProtectorAgainstGuard(GuardTestCase):
    def test_wsgi_login(self) -> None:
        client = Client(self.guard.url, KEY_CHECK, timeout=TEST_TIMEOUT)
        self.addCleanup(client.close)
        seen: List[Any] = []
        p = Protector(client, "login", ip=IPExtractor(["127.0.0.1"]), device_cookie="dev")
        url, httpd = serve(login_app(p, seen))
        self.addCleanup(httpd.server_close)
        self.addCleanup(httpd.shutdown)

        status, _, _ = post(url, {"email": "Uma@Example.com"}, {"X-Forwarded-For": "198.51.100.80", "Cookie": "a=1; dev=d-cookie"})
        self.assertEqual(status, 204)
        a = seen[0]
        self.assertEqual((a.user, a.ip, a.device), ("Uma@Example.com", "198.51.100.80", "d-cookie"))
        self.assertTrue(a.result.decision_id)
        for _ in range(9):
            client.flush(5)
            post(url, {"email": "uma@example.com"}, {"X-Forwarded-For": "198.51.100.80"})
        client.flush(5)
        status, headers, body = post(url, {"email": "uma@example.com"}, {"X-Forwarded-For": "198.51.100.80"})
        self.assertEqual(status, 429)
        self.assertEqual(headers["Retry-After"], "60")
        self.assertTrue(headers["RateLimit"])
        self.assertTrue(headers["RateLimit-Policy"])
        self.assertEqual(json.loads(body), {"error": {"code": "too_many_attempts",
                                                      "message": "Too many attempts. Try again in 1 minute."}})
        self.assertEqual(len(seen), 10, "the handler did not run for the denied attempt")
        status, _, _ = post(url, {"email": "uma@example.com", "ok": "1"}, {"X-Forwarded-For": "198.51.100.81"})
        self.assertEqual(status, 204, "another address is not locked")
        status, _, _ = post(url, {"email": "x" * 300})
        self.assertEqual(status, 400, "an identifier Guard refuses is the end client's 400")
        status, _, _ = post(url, {"email": "x" * 9000})
        self.assertEqual(status, 400, "so is one that makes the check's body pass Guard's 8 KiB (413)")

    def test_repeated_real_ip_takes_the_last(self) -> None:
        # A proxy that adds its X-Real-IP instead of replacing the client's
        # puts its own after the forged one.
        seen: List[str] = []

        class Recording(IPExtractor):
            def client_ip(self, peer: str, forwarded_for: Sequence[str] = (), real_ip: str = "") -> str:
                seen.append(real_ip)
                return super().client_ip(peer, forwarded_for, real_ip)

        srv = hanging()
        self.addCleanup(srv.close)
        client = Client(srv.url, "k", timeout=0.03)
        self.addCleanup(client.close)
        p = Protector(client, "login", ip=Recording(["10.0.0.0/8"]))
        p.check(Request(peer="10.0.0.1", headers=[("X-Real-IP", "203.0.113.66"), ("x-real-ip", "198.51.100.8")]))
        self.assertEqual(seen, ["198.51.100.8"])

    def test_failure_policies(self) -> None:
        srv = hanging()
        self.addCleanup(srv.close)
        client = Client(srv.url, "k", timeout=0.03)
        self.assertTrue(Protector(client, "login").check(Request(peer="192.0.2.1")).allowed)
        v = Protector(client, "login", failure_policy=FailurePolicy.CLOSED).check(Request(peer="192.0.2.1"))
        self.assertEqual((v.allowed, v.status), (False, 503))
        self.assertNotIn("Retry-After", dict(v.headers))
        for error in (FailurePolicy.ERROR, "error"):  # FailurePolicy is a str enum: "error" is ERROR
            with self.assertRaises(ValueError):
                Protector(client, "login", failure_policy=error)  # type: ignore[arg-type]
        v = Protector(client, "login", failure_policy="closed").check(Request(peer="192.0.2.1"))  # type: ignore[arg-type]
        self.assertEqual((v.allowed, v.status), (False, 503))


class Helpers(unittest.TestCase):
    def test_client_ip(self) -> None:
        x = IPExtractor(["10.0.0.0/8", "::1"])
        cases = [
            ("203.0.113.9", ["198.51.100.1"], "", "203.0.113.9"),
            ("10.0.0.1", [], "", "10.0.0.1"),
            ("10.0.0.1", ["1.1.1.1, 198.51.100.1, 10.0.0.2"], "", "198.51.100.1"),
            ("10.0.0.1", ["1.1.1.1", "198.51.100.1"], "", "198.51.100.1"),
            ("10.0.0.1", ["203.0.113.5:1234"], "", "203.0.113.5"),
            ("10.0.0.1", ["[2001:db8::5]:443"], "", "2001:db8::5"),
            ("10.0.0.1", ["198.51.100.7, unknown, , 10.0.0.3"], "", "198.51.100.7"),
            ("10.0.0.1", ["198.51.100.7, 203.0.113.5:abc, [2001:db8::5]:, 203.0.113.6:99999, 203.0.113.7:\u00b2"], "", "198.51.100.7"),
            ("10.0.0.1", ["unknown"], "198.51.100.8", "198.51.100.8"),
            ("10.0.0.1", ["10.0.0.9, 10.0.0.2"], "", "10.0.0.9"),
            ("[::1]:80", ["198.51.100.3"], "", "198.51.100.3"),
            ("::ffff:10.0.0.1", ["::ffff:198.51.100.5"], "", "198.51.100.5"),
            ("10.0.0.1", ["2001:DB8:0:0:0:0:0:1"], "", "2001:db8::1"),
            ("", [], "", ""),
        ]
        for peer, xff, real, want in cases:
            with self.subTest(peer=peer, xff=xff):
                self.assertEqual(x.client_ip(peer, xff, real), want)
        self.assertEqual(IPExtractor().client_ip("10.0.0.1", ["198.51.100.1"]), "10.0.0.1")
        with self.assertRaises(ValueError):
            IPExtractor(["10.0.0.0/33"])

    def test_requests(self) -> None:
        w = wsgi_request({"REMOTE_ADDR": "192.0.2.1", "HTTP_X_FORWARDED_FOR": "198.51.100.1", "PATH_INFO": "/"})
        self.assertEqual((w.peer, w.values("X-Forwarded-For")), ("192.0.2.1", ["198.51.100.1"]))
        a = asgi_request({"client": ("2001:db8::1", 443), "headers": [(b"x-forwarded-for", b"198.51.100.2")]})
        self.assertEqual((a.peer, a.values("x-forwarded-for")), ("[2001:db8::1]", ["198.51.100.2"]))

    def test_denial_message(self) -> None:
        for ms, want in [(0, "Too many attempts. Try again later."), (41250, "Too many attempts. Try again in 42 seconds."),
                         (60000, "Too many attempts. Try again in 1 minute."), (3600001, "Too many attempts. Try again in 2 hours.")]:
            self.assertEqual(denial_message(CheckResponse(decision="deny", reason="rate_limited", retry_after_ms=ms)), want)


if __name__ == "__main__":
    unittest.main()
