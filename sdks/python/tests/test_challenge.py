"""Challenge answers (contract v1.1) against a real Guard's built-in policy.

signup challenges a device after 5 sign-ups an hour.
"""

from __future__ import annotations

import json
import unittest

from guard_sdk import CHALLENGE_MESSAGE, Client, Protector, Request
from tests.guard_server import KEY_CHECK, TEST_TIMEOUT, GuardTestCase


class ChallengeAgainstGuard(GuardTestCase):
    def test_client_challenge_then_passed(self) -> None:
        c = Client(self.guard.url, KEY_CHECK, timeout=TEST_TIMEOUT)
        for _ in range(5):
            self.assertTrue(c.check("signup", device="d-py-1", ip="198.51.100.91").allowed)
        got = c.check("signup", device="d-py-1", ip="198.51.100.91")
        self.assertTrue(got.challenge)
        self.assertFalse(got.allowed)
        self.assertEqual(got.reason, "challenge_required")
        self.assertGreater(got.retry_after_ms, 0)
        passed = c.check("signup", device="d-py-1", ip="198.51.100.91", challenge_passed=True)
        self.assertTrue(passed.allowed)
        self.assertEqual(passed.reason, "ok")

    def test_protector_answers_a_challenge(self) -> None:
        p = Protector(Client(self.guard.url, KEY_CHECK, timeout=TEST_TIMEOUT), "signup", device_header="X-Device")
        req = Request(peer="198.51.100.92", headers=[("X-Device", "d-py-2")])
        for _ in range(5):
            self.assertTrue(p.check(req).allowed)
        v = p.check(req)
        self.assertFalse(v.allowed)
        self.assertEqual(v.status, 429)
        self.assertEqual(v.status_line, "429 Too Many Requests")
        headers = dict(v.headers)
        self.assertNotIn("Retry-After", headers)
        self.assertIn("RateLimit", headers)
        self.assertEqual(json.loads(v.body), {"error": {"code": "challenge_required", "message": CHALLENGE_MESSAGE}})
        self.assertTrue(p.check(req, challenge_passed=True).allowed)


if __name__ == "__main__":
    unittest.main()
