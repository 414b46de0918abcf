"""verify_webhook against signatures made here and against the ones a real
Guard sends (a manual lockout notification to a local receiver)."""

import json
import threading
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from guard_sdk import SIGNATURE_HEADER, Notification, WebhookVerificationError, sign_webhook, verify_webhook
from tests.guard_server import KEY_ADMIN, Guard

SECRET = "whsec-test"
BODY = b'{"id":"01JD","event":"lockout"}'
T0 = 1764586800
GOOD = sign_webhook(SECRET, T0, BODY)


class VerifyWebhook(unittest.TestCase):
    def test_shape(self) -> None:
        self.assertRegex(GOOD, r"^t=1764586800,v1=[0-9a-f]{64}$")

    def test_cases(self) -> None:
        rotated = sign_webhook("old", T0, BODY) + ",v1=" + GOOD.split("v1=")[1]
        cases = [
            ("valid", SECRET, GOOD, BODY, T0 + 60, 300, None),
            ("str body", SECRET, GOOD, BODY.decode(), T0, 300, None),
            ("rotation", SECRET, rotated, BODY, T0, 300, None),
            ("wrong secret", "nope", GOOD, BODY, T0, 300, "signature_mismatch"),
            ("body changed", SECRET, GOOD, BODY.replace(b"lockout", b"unlock"), T0, 300, "signature_mismatch"),
            ("replayed later", SECRET, GOOD, BODY, T0 + 301, 300, "signature_expired"),
            ("from the future", SECRET, GOOD, BODY, T0 - 301, 300, "signature_expired"),
            ("own tolerance", SECRET, GOOD, BODY, T0 + 31, 30, "signature_expired"),
            ("no header", SECRET, None, BODY, T0, 300, "signature_missing"),
            ("no v1", SECRET, "t=1764586800", BODY, T0, 300, "signature_missing"),
            ("t not a number", SECRET, "t=soon,v1=00", BODY, T0, 300, "signature_missing"),
        ]
        for name, secret, header, body, now, tolerance, code in cases:
            with self.subTest(name):
                if code is None:
                    verify_webhook(secret, header, body, now=now, tolerance=tolerance)
                    continue
                with self.assertRaises(WebhookVerificationError) as cm:
                    verify_webhook(secret, header, body, now=now, tolerance=tolerance)
                self.assertEqual(cm.exception.code, code)


class NotificationBody(unittest.TestCase):
    def test_from_wire(self) -> None:
        # The body of api.md's example; nulls as None, phone absent (None), a field a newer Guard adds ignored.
        n = Notification.from_wire(json.loads(
            '{"id":"01JDZ8K3Q4W5E6R7T8Y9U0I1O2","event":"lockout","at":"2026-12-01T11:00:00.123Z",'
            '"instance":"guard-1","ledger":"auth","dimension":"user","user":"alice@example.com","ip":null,'
            '"device":null,"level":2,"until":"2026-12-01T11:05:00.123Z","reason":"login/user/failures","new":1}'))
        self.assertEqual((n.id, n.event, n.at, n.instance, n.ledger, n.dimension, n.user, n.ip, n.device, n.phone,
                          n.level, n.until, n.reason),
                         ("01JDZ8K3Q4W5E6R7T8Y9U0I1O2", "lockout", "2026-12-01T11:00:00.123Z", "guard-1", "auth", "user",
                          "alice@example.com", None, None, None, 2, "2026-12-01T11:05:00.123Z", "login/user/failures"))
        u = Notification.from_wire({"id": "x", "event": "unlock", "at": "2026-12-01T11:00:00.123Z", "instance": "g",
                                    "ledger": None, "dimension": "phone", "user": None, "ip": None, "device": None,
                                    "phone": "+447400123456", "level": 0, "until": None, "reason": ""})
        self.assertEqual((u.ledger, u.phone, u.until, u.level), (None, "+447400123456", None, 0))


class RealGuard(unittest.TestCase):
    def test_notification_verifies(self) -> None:
        got = []
        done = threading.Event()

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    verify_webhook("whsec-py-e2e", self.headers.get(SIGNATURE_HEADER), raw)
                    got.append(json.loads(raw))
                except WebhookVerificationError as e:
                    got.append(e)
                self.send_response(204)
                self.end_headers()
                done.set()

            def log_message(self, *args: object) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        guard = Guard(f'notifications: {{webhook_url: "http://127.0.0.1:{srv.server_address[1]}/hook", '
                      f'secret: whsec-py-e2e}}\n')
        self.addCleanup(guard.stop)
        req = urllib.request.Request(
            guard.url + "/v1/lockouts", method="POST",
            data=json.dumps({"dimension": "ip", "ip": "203.0.113.9", "duration_ms": 60000,
                             "reason": "py test", "ledger": "auth"}).encode(),
            headers={"Authorization": "Bearer " + KEY_ADMIN, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            self.assertEqual(resp.status, 201)
        self.assertTrue(done.wait(20), "no notification within 20s")
        n = got[0]
        self.assertIsInstance(n, dict, n)
        self.assertEqual((n["event"], n["dimension"], n["ip"], n["user"], n["reason"]),
                         ("lockout", "ip", "203.0.113.9", None, "py test"))
        typed = Notification.from_wire(n)
        self.assertEqual((typed.event, typed.ledger, typed.level, typed.user, typed.phone), ("lockout", "auth", 0, None, None))
        self.assertRegex(typed.until or "", r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


if __name__ == "__main__":
    unittest.main()
