"""Drives every endpoint the SDK covers against a real Guard."""

import json
import re
import unittest
from datetime import datetime, timedelta, timezone

from guard_sdk import Client, GuardError
from tests.guard_server import KEY_ADMIN, KEY_AUDIT, KEY_CHECK, TEST_TIMEOUT, GuardTestCase, eventually


class EndToEnd(GuardTestCase):
    def test_every_endpoint(self) -> None:
        url = self.guard.url
        checker, admin, auditor = Client(url, KEY_CHECK, timeout=TEST_TIMEOUT), Client(url, KEY_ADMIN, timeout=TEST_TIMEOUT), Client(url, KEY_AUDIT, timeout=TEST_TIMEOUT)

        res = checker.check("login", user="Alice@Example.COM", ip="203.0.113.7", device="d-alice")
        self.assertTrue(res.allowed)
        self.assertEqual(res.reason, "ok")
        self.assertFalse(res.bypassed)
        self.assertEqual(len(res.limits), 2)
        self.assertTrue(res.decision_id)
        self.assertIn('"login/ip";r=59;t=60', res.rate_limit)
        self.assertIn('"login/ip";q=60;w=60', res.rate_limit_policy)

        dry = checker.check("login", ip="203.0.113.8", cost=2, dry_run=True)
        self.assertEqual(dry.limits[0].remaining, 58)
        # A float without a fraction (what arithmetic on floats gives) is the integer it names:
        # json.dumps would write 2.0, which Guard refuses (400 field cost).
        self.assertEqual(checker.check("login", ip="203.0.113.8", cost=2.0, dry_run=True).limits[0].remaining, 58)

        rep = checker.report("login", "success", user="Alice@Example.COM", ip="203.0.113.7",
                             device="d-alice", decision_id=res.decision_id)
        self.assertIsNone(rep.lockout)
        struck = None
        for _ in range(10):
            struck = checker.report("login", "failure", user="bob@example.com", ip="198.51.100.9").lockout
        assert struck is not None
        self.assertEqual((struck.dimension, struck.level), ("user+ip", 1))
        self.assertRegex(struck.until, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

        denied = checker.check("login", user="bob@example.com", ip="198.51.100.9")
        self.assertFalse(denied.allowed)
        self.assertEqual(denied.reason, "locked_out")
        self.assertTrue(0 < denied.retry_after <= 60)
        self.assertIsNotNone(denied.lockout)

        ls = admin.lockouts(user="BOB@example.com", dimension="user+ip")
        self.assertEqual(len(ls), 1)
        self.assertEqual((ls[0].ip, ls[0].ledger, ls[0].until, ls[0].device), ("198.51.100.9", "auth", struck.until, None))
        with self.assertRaises(GuardError) as cm:
            checker.lockouts()
        self.assertEqual((cm.exception.status, cm.exception.code), (403, "forbidden"))

        admin.unlock("user+ip", user="bob@example.com", ip="198.51.100.9", reason="py e2e")
        with self.assertRaises(GuardError) as cm:
            admin.unlock("user+ip", user="bob@example.com", ip="198.51.100.9")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        self.assertTrue(checker.check("login", user="bob@example.com", ip="198.51.100.9").allowed)

        policy = admin.policy()
        self.assertEqual(len(policy["actions"]["login"]["limits"]), 2)
        self.assertEqual(policy["actions"]["login"]["lockout"]["ledger"], "auth")

        # The ten report events land asynchronously; page through them once all are stored.
        self.assertTrue(eventually(lambda: len(auditor.audit(user="bob@example.com", kind="report")) == 10))
        page = auditor.audit(user="bob@example.com", kind="report", limit=4)
        self.assertEqual(len(page), 4)
        self.assertEqual((page[0].kind, page[0].outcome, page[0].user), ("report", "failure", "bob@example.com"))
        self.assertEqual(page[0].api_key, "auth-service")
        self.assertIsNone(page[0].decision)  # a report carries no decision
        self.assertIsNotNone(page.next_cursor)
        nxt = auditor.audit(user="bob@example.com", kind="report", limit=4, cursor=page.next_cursor)
        self.assertEqual(len(nxt), 4)
        self.assertNotEqual(nxt[0].id, page[0].id)
        last = auditor.audit(user="bob@example.com", kind="report", limit=4, cursor=nxt.next_cursor)
        self.assertEqual((len(last), last.next_cursor), (2, None))
        with self.assertRaises(GuardError) as cm:
            auditor.audit(cursor="forged")
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "cursor"))

        nd = auditor.export_audit("ndjson", user="bob@example.com", kind="report")
        events = [json.loads(line) for line in nd.strip().split("\n")]
        self.assertEqual(len(events), 10)
        self.assertTrue(all(e["kind"] == "report" for e in events))
        csv = eventually(lambda: (lambda c: c if len(c.strip().split("\n")) == 2 else None)(
            auditor.export_audit("csv", kind="admin")))
        assert csv is not None
        self.assertIn("py e2e", csv)
        self.assertTrue(csv.startswith("id,at,kind,"))

        ready = checker.ready()
        self.assertEqual((ready.mode, ready.redis, ready.audit_backlog >= 0), ("normal", "ok", True))
        self.assertIsNone(Client(url, "").health(), "healthz needs no key")
        with self.assertRaises(GuardError) as cm:
            checker.check("nope", user="x")
        self.assertEqual(cm.exception.code, "unknown_action")
        with self.assertRaises(GuardError) as cm:
            checker.check("login", ip="203.0.113.007")
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "ip"))
        with self.assertRaises(GuardError) as cm:
            Client(url, "wrong").policy()
        self.assertEqual(cm.exception.status, 401)
        self.assertTrue(re.match(r".+", cm.exception.message))

    def test_audit_time_filters_take_datetimes(self) -> None:
        checker, auditor = Client(self.guard.url, KEY_CHECK, timeout=TEST_TIMEOUT), Client(self.guard.url, KEY_AUDIT, timeout=TEST_TIMEOUT)
        before = datetime.now(timezone.utc) - timedelta(seconds=1)
        checker.check("login", user="carol@example.com", ip="192.0.2.50")
        self.assertTrue(eventually(lambda: auditor.audit(user="carol@example.com", since=before)))
        self.assertEqual(auditor.audit(user="carol@example.com", until=before), [])
        # An aware datetime in another zone names the same instant.
        plus2 = before.astimezone(timezone(timedelta(hours=2)))
        self.assertEqual(len(auditor.audit(user="carol@example.com", since=plus2)), 1)
        nd = auditor.export_audit("ndjson", user="carol@example.com", since=before)
        self.assertEqual(len(nd.strip().split("\n")), 1)


class AdminEndToEnd(GuardTestCase):
    """Admin calls that write audit events, on their own Guard so that EndToEnd counts only its own."""

    def test_manual_lockouts(self) -> None:
        admin, checker = Client(self.guard.url, KEY_ADMIN, timeout=TEST_TIMEOUT), Client(self.guard.url, KEY_CHECK, timeout=TEST_TIMEOUT)
        ips = ["192.0.2.101", "192.0.2.102", "192.0.2.103"]
        for ip in ips:
            locked = admin.lock("ip", 3_600_000, ip=ip, ledger="auth", reason="py manual")
            self.assertEqual([(e.dimension, e.ip, e.ledger, e.level) for e in locked], [("ip", ip, "auth", 0)])
            self.assertRegex(locked[0].until, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertEqual(checker.check("login", ip=ips[0]).reason, "locked_out")
        # A timedelta, as Go's LockRequest.Duration, or a float without a fraction (0.5 * 3600 * 1000).
        for duration in (timedelta(minutes=30), 0.5 * 3600 * 1000):
            with self.subTest(duration=duration):
                e = admin.lock("ip", duration, ip="192.0.2.104", ledger="auth", reason="py manual")[0]
                self.assertEqual(e.ip, "192.0.2.104")
        admin.unlock("ip", ip="192.0.2.104", reason="py manual done")
        with self.assertRaises(GuardError) as cm:
            admin.lock("ip", 1, ip=ips[0])
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "duration_ms"))
        with self.assertRaises(GuardError) as cm:
            checker.lock("ip", 60_000, ip=ips[0])
        self.assertEqual(cm.exception.status, 403)
        for ip in ips:
            admin.unlock("ip", ip=ip, reason="py manual done")
        self.assertEqual(checker.check("login", ip=ips[0]).reason, "ok")

    def test_paged_lockout_listings(self) -> None:
        admin = Client(self.guard.url, KEY_ADMIN, timeout=TEST_TIMEOUT)
        ips = ["192.0.2.111", "192.0.2.112", "192.0.2.113"]
        for ip in ips:
            admin.lock("ip", 3_600_000, ip=ip, ledger="auth", reason="py paging")
        seen, cursor, pages = [], None, 0
        while True:
            page = admin.lockouts(dimension="ip", ledger="auth", limit=2.0, cursor=cursor)  # type: ignore[arg-type]
            self.assertLessEqual(len(page), 2)
            seen += [e.ip for e in page]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        self.assertEqual(sorted(ip for ip in seen if ip in ips), ips)
        self.assertGreaterEqual(pages, 2)
        with self.assertRaises(GuardError) as cm:
            admin.lockouts(cursor="forged")
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "cursor"))
        for ip in ips:
            admin.unlock("ip", ip=ip, reason="py paging done")


if __name__ == "__main__":
    unittest.main()
