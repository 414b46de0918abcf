"""Wire types of the Guard HTTP API (contract v1), as the Go SDK's sdk/wire.go defines them.

Times are RFC 3339 strings with milliseconds (UTC); durations are integer
milliseconds in fields ending in ``_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Iterable, List, Optional, Type, TypeVar

_T = TypeVar("_T")


def _known(cls: Type[_T], d: Dict[str, Any]) -> _T:
    """cls from the wire object d, ignoring fields a newer Guard may add."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in d.items() if k in names})

ALLOW = "allow"
DENY = "deny"
CHALLENGE = "challenge"  # contract v1.1: treat anything but "allow" as "not now"

SUCCESS = "success"
FAILURE = "failure"

#: Reason of an answer a failure policy gave because Guard could not answer.
REASON_GUARD_UNAVAILABLE = "guard_unavailable"


@dataclass
class Limit:
    rule: str
    dimension: str
    limit: int
    window_ms: int
    remaining: int
    reset_ms: int
    #: "log", "counter" or "bucket" (contract v1.1).
    algorithm: str = "log"
    #: "user" or "device" for a distinct-count rule, else None.
    distinct: Optional[str] = None


@dataclass
class Lockout:
    dimension: str
    until: str
    level: int


@dataclass
class CheckResponse:
    """The answer of POST /v1/check, plus what the client adds (not on the wire)."""

    decision: str
    reason: str
    retry_after_ms: int = 0
    decision_id: str = ""
    degraded: bool = False
    limits: List[Limit] = field(default_factory=list)
    lockout: Optional[Lockout] = None
    #: The RateLimit and RateLimit-Policy headers Guard sent ("" for none), for relaying.
    rate_limit: str = ""
    rate_limit_policy: str = ""
    #: Set when Guard could not answer and the failure policy decided; cause says why.
    bypassed: bool = False
    cause: Optional[BaseException] = None

    @property
    def allowed(self) -> bool:
        return self.decision == ALLOW

    @property
    def challenge(self) -> bool:
        """Guard asks for a challenge: show one, then check again with challenge_passed=True."""
        return self.decision == CHALLENGE

    @property
    def retry_after(self) -> float:
        """The exact wait in seconds before the same attempt could be allowed; 0 when allowed."""
        return self.retry_after_ms / 1000.0

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "CheckResponse":
        lo = d.get("lockout")
        return cls(
            decision=d["decision"], reason=d["reason"], retry_after_ms=d.get("retry_after_ms", 0),
            decision_id=d.get("decision_id", ""), degraded=d.get("degraded", False),
            limits=[_known(Limit, x) for x in d.get("limits") or []],
            lockout=_known(Lockout, lo) if lo else None,
        )


@dataclass
class ReportResponse:
    lockout: Optional[Lockout]

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "ReportResponse":
        lo = d.get("lockout")
        return cls(lockout=_known(Lockout, lo) if lo else None)


@dataclass
class LockoutEntry:
    ledger: str
    dimension: str
    level: int
    since: str
    until: str
    user: Optional[str] = None
    ip: Optional[str] = None
    device: Optional[str] = None
    #: E.164 on phone lockouts; the ISO 3166 region and the number prefix on
    #: phone_country and phone_prefix lockouts.
    phone: Optional[str] = None
    phone_country: Optional[str] = None
    phone_prefix: Optional[str] = None

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "LockoutEntry":
        """Reads one entry, ignoring fields a newer Guard may add."""
        return _known(cls, d)


class _Page(List[_T]):
    """A page of a listing: a list of its items, plus ``next_cursor``, the ``cursor`` of the next
    page (None on the last)."""

    def __init__(self, items: Iterable[_T] = (), next_cursor: Optional[str] = None) -> None:
        super().__init__(items)
        self.next_cursor = next_cursor


class LockoutPage(_Page[LockoutEntry]):
    """One page of GET /v1/lockouts: a list of its entries, plus ``next_cursor``, the ``cursor``
    of the next page (None when the listing is complete)."""


@dataclass
class AuditEvent:
    """One event of the audit trail (GET /v1/audit); fields that do not apply to its kind are None."""

    id: str
    at: str
    #: "check", "report" or "admin".
    kind: str
    action: Optional[str] = None
    decision: Optional[str] = None
    reason: Optional[str] = None
    outcome: Optional[str] = None
    user: Optional[str] = None
    ip: Optional[str] = None
    device: Optional[str] = None
    #: E.164, or its keyed hash under audit.pseudonymize (contract v1.1).
    phone: Optional[str] = None
    rule: Optional[str] = None
    retry_after_ms: Optional[int] = None
    lockout_until: Optional[str] = None
    degraded: Optional[bool] = None
    dry_run: Optional[bool] = None
    #: The acting key's name on admin events.
    api_key: Optional[str] = None
    decision_id: Optional[str] = None
    instance: Optional[str] = None
    #: An admin's reason.
    note: Optional[str] = None

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "AuditEvent":
        """Reads one event, ignoring fields a newer Guard may add."""
        return _known(cls, d)


class AuditPage(_Page[AuditEvent]):
    """One page of GET /v1/audit, newest first: a list of its events, plus ``next_cursor``, the
    ``cursor`` of the next page (None when no event follows)."""

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "AuditPage":
        return cls((AuditEvent.from_wire(e) for e in d.get("events") or []), d.get("next_cursor"))


@dataclass
class Readiness:
    """GET /readyz: whether Guard can decide, and on what."""

    #: "normal", or "degraded" while Redis is unreachable (Guard decides from its fallback).
    mode: str
    #: "ok" or "down".
    redis: str
    postgres: str
    #: Audit events queued or spooled but not yet in Postgres.
    audit_backlog: int = 0

    @classmethod
    def from_wire(cls, d: Dict[str, Any]) -> "Readiness":
        return _known(cls, d)
