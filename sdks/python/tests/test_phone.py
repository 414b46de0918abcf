"""Phone numbers (contract v1.1) against a real Guard."""

import unittest

from guard_sdk import Client, GuardError
from tests.guard_server import KEY_ADMIN, KEY_AUDIT, KEY_CHECK, TEST_TIMEOUT, GuardTestCase, eventually

# otp_verify locks a number after two failures; RU is denied.
CONFIG = """phone: {default_region: GB}
lists:
  deny: {countries: [RU]}
actions:
  otp_send:
    limits:
      - {dimension: phone, limit: 2, window: 10m}
      - {dimension: phone_prefix, limit: 50, window: 1h}
      - {dimension: phone_country, limit: 1000, window: 1h}
  otp_verify:
    failures:
      - {dimension: phone, limit: 2, window: 10m}
    lockout: {ladder: [1m]}
"""


class Phones(GuardTestCase):
    CONFIG = CONFIG

    def test_phone_rules_lockouts_and_audit(self) -> None:
        url = self.guard.url
        checker, admin, auditor = Client(url, KEY_CHECK, timeout=TEST_TIMEOUT), Client(url, KEY_ADMIN, timeout=TEST_TIMEOUT), Client(url, KEY_AUDIT, timeout=TEST_TIMEOUT)

        first = checker.check("otp_send", phone="+44 7400 123456")
        self.assertTrue(first.allowed)
        self.assertEqual(sorted(lim.dimension for lim in first.limits), ["phone", "phone_country", "phone_prefix"])
        self.assertTrue(checker.check("otp_send", phone="07400 123456").allowed)
        third = checker.check("otp_send", phone="+447400123456")
        self.assertFalse(third.allowed)
        self.assertEqual(third.limits[0].rule, "otp_send/phone")
        self.assertEqual(checker.check("otp_send", phone="+7 912 345-67-89").reason, "denylisted")
        with self.assertRaises(GuardError) as cm:
            checker.check("otp_send", phone="+1 999 555 0123")
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "phone"))

        for _ in range(2):
            struck = checker.report("otp_verify", "failure", phone="+447400123456").lockout
        assert struck is not None
        self.assertEqual(struck.dimension, "phone")
        ls = admin.lockouts(phone="07400123456")
        self.assertEqual([(e.dimension, e.phone, e.user) for e in ls], [("phone", "+447400123456", None)])
        admin.unlock("phone", phone="+447400123456", reason="py phone")
        self.assertEqual(admin.lockouts(phone="+447400123456"), [])

        self.assertTrue(eventually(lambda: len(auditor.audit(phone="+447400123456")) == 6), "six events")
        denied = auditor.audit(phone="07400 123456", decision="deny")
        self.assertEqual([e.phone for e in denied], ["+447400123456"])
        csv = auditor.export_audit("csv", phone="+447400123456", kind="report")
        self.assertIn(",phone,", csv.splitlines()[0])
        self.assertEqual(len(csv.strip().splitlines()), 3)


if __name__ == "__main__":
    unittest.main()
