"""Lockout notifications (contract v1.1): the check of the X-Guard-Signature
header Guard puts on every POST to notifications.webhook_url, as the Go SDK's
sdk/webhook.go defines it."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from ._types import _known

SIGNATURE_HEADER = "X-Guard-Signature"
DEFAULT_WEBHOOK_TOLERANCE = 300.0  # seconds

_HEX = re.compile(r"^(?:[0-9a-fA-F]{2})+$")
_INT = re.compile(r"^-?[0-9]+$")

Bytes = Union[str, bytes]


def _b(v: Bytes) -> bytes:
    return v.encode() if isinstance(v, str) else v


@dataclass
class Notification:
    """The JSON body Guard POSTs to notifications.webhook_url (as Go's sdk.Notification and
    TypeScript's Notification); read it with ``Notification.from_wire(json.loads(body))`` once
    verify_webhook passed.

    Identifiers are as the audit event beside it has them (keyed hashes under
    audit.pseudonymize), None when null: for a strike those of the striking request, for a
    manual lockout or an unlock those of ``dimension``, which says which key is locked (an
    "ip" lockout may name the user whose attempt struck it). Deliveries are at least once:
    deduplicate on ``id``, the same on every retry. Times are RFC 3339 strings with
    milliseconds (UTC).
    """

    #: Unique per notification (a ULID).
    id: str
    #: "lockout" (a strike or a manual lockout) or "unlock".
    event: str
    at: str
    instance: str
    #: None only for an unlock of every ledger when Guard could not tell which were locked.
    ledger: Optional[str]
    dimension: str
    user: Optional[str]
    ip: Optional[str]
    device: Optional[str]
    #: After a strike the ladder step (from 1); a manual lockout's current level (0 without strikes); 0 for an unlock.
    level: int
    #: When the lockout ends; None for an unlock.
    until: Optional[str]
    #: The striking rule's name, or the administrator's reason ("" when none was given).
    reason: str
    #: The E.164 number (or its hash), or the region / prefix of a phone_country / phone_prefix
    #: lockout; absent from the body (None here) when the lockout involves no phone.
    phone: Optional[str] = None

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Notification":
        """Reads a notification body, ignoring fields a newer Guard may add."""
        return _known(cls, d)


class WebhookVerificationError(Exception):
    """A notification that must not be trusted; code is signature_missing,
    signature_mismatch or signature_expired."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _mac(secret: Bytes, t: str, body: Bytes) -> bytes:
    return hmac.new(_b(secret), t.encode() + b"." + _b(body), hashlib.sha256).digest()


def sign_webhook(secret: Bytes, unix_seconds: int, body: Bytes) -> str:
    """The X-Guard-Signature value for body signed with secret at unix_seconds
    (for receivers' tests)."""
    t = str(int(unix_seconds))
    return f"t={t},v1={_mac(secret, t, body).hex()}"


def verify_webhook(secret: Bytes, header: Optional[str], body: Bytes, now: Optional[float] = None,
                   tolerance: float = DEFAULT_WEBHOOK_TOLERANCE) -> None:
    """Checks a notification's X-Guard-Signature header against the raw body
    (verify before parsing it): the HMAC is compared in constant time and the
    timestamp must lie within tolerance seconds of now (default time.time()),
    so a captured request cannot be replayed later. Several v1= parts (a
    secret rotation) pass when one matches. Raises WebhookVerificationError."""
    t = ""
    sigs = []
    for part in (header or "").split(","):
        k, sep, v = part.partition("=")
        if not sep:
            continue
        k, v = k.strip(), v.strip()
        if k == "t":
            t = v
        elif k == "v1" and _HEX.match(v):
            sigs.append(bytes.fromhex(v))
    if not _INT.match(t) or not sigs:
        raise WebhookVerificationError("signature_missing", "guard webhook: signature header missing or malformed")
    want = _mac(secret, t, body)
    match = False
    for s in sigs:
        # Every candidate is compared, so the time taken does not tell which matched.
        match = hmac.compare_digest(s, want) or match
    if not match:
        raise WebhookVerificationError("signature_mismatch", "guard webhook: signature does not match")
    if tolerance <= 0:
        tolerance = DEFAULT_WEBHOOK_TOLERANCE
    if abs((time.time() if now is None else now) - int(t)) > tolerance:
        raise WebhookVerificationError("signature_expired", "guard webhook: signature timestamp outside tolerance")
