from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union

from ._client import Client, FailurePolicy
from ._errors import GuardError
from ._ip import IPExtractor
from ._types import CheckResponse

Headers = Union[Mapping[str, str], Iterable[Tuple[str, str]]]


@dataclass
class Request:
    """The parts of an HTTP request the helper reads, from any framework."""

    #: The TCP peer address (with or without a port).
    peer: str
    #: Header (name, value) pairs; names in any case, repeated names kept.
    headers: List[Tuple[str, str]] = field(default_factory=list)

    def values(self, name: str) -> List[str]:
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]


def wsgi_request(environ: Mapping[str, Any]) -> Request:
    """A Request from a WSGI environ (REMOTE_ADDR and HTTP_* keys)."""
    headers = [(k[5:].replace("_", "-").lower(), str(v)) for k, v in environ.items() if k.startswith("HTTP_")]
    return Request(peer=str(environ.get("REMOTE_ADDR", "")), headers=headers)


def asgi_request(scope: Mapping[str, Any]) -> Request:
    """A Request from an ASGI HTTP scope (client and raw headers)."""
    client = scope.get("client") or ("", 0)
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
    host = client[0]
    return Request(peer=f"[{host}]" if ":" in host else host, headers=headers)


@dataclass
class Attempt:
    """One checked attempt; report() says how it ended."""

    action: str
    user: Optional[str]
    ip: Optional[str]
    device: Optional[str]
    result: CheckResponse
    client: Client
    phone: Optional[str] = None

    def report(self, outcome: str) -> None:
        """Reports "success" or "failure" in the background, with the check's decision id.

        Report failures for unknown accounts too, or lockouts tell which
        accounts exist.
        """
        decision_id = None if self.result.bypassed else (self.result.decision_id or None)
        self.client.report_in_background(self.action, outcome, user=self.user, ip=self.ip,
                                         device=self.device, phone=self.phone, decision_id=decision_id)


@dataclass
class Verdict:
    """What the helper decided for a request.

    When ``allowed`` is false, answer with ``status``, ``headers`` and
    ``body`` (429 with Retry-After and the RateLimit headers, or 503 when a
    closed policy denied because Guard could not answer, or 400 for an
    identifier Guard refused or found too large for a check); the body names
    no rule, limit or account.
    """

    allowed: bool
    attempt: Optional[Attempt] = None
    status: int = 200
    headers: List[Tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def status_line(self) -> str:
        """``status`` with its reason phrase, as WSGI's start_response takes it ("429 Too Many Requests")."""
        return f"{self.status} {HTTPStatus(self.status).phrase}"


def denial_message(result: CheckResponse) -> str:
    """The text to show the person: the same for rate limits, lockouts and deny lists, accounts or not."""
    if result.bypassed:
        return "The service is busy. Try again shortly."
    secs = math.ceil(result.retry_after_ms / 1000)
    if secs <= 0:
        return "Too many attempts. Try again later."

    def unit(n: int, one: str, many: str) -> str:
        return f"1 {one}" if n == 1 else f"{n} {many}"

    if secs < 60:
        wait = unit(secs, "second", "seconds")
    elif secs <= 3600:
        wait = unit(math.ceil(secs / 60), "minute", "minutes")
    else:
        wait = unit(math.ceil(secs / 3600), "hour", "hours")
    return f"Too many attempts. Try again in {wait}."


#: What a challenge answer tells the person; it names no rule, limit or account.
CHALLENGE_MESSAGE = "Please confirm you are not a robot and try again."


def challenge_answer(result: CheckResponse) -> Verdict:
    """The answer to an attempt Guard wants challenged: 429 challenge_required, RateLimit headers, no Retry-After.

    The client shows its challenge and sends the request again with the proof,
    which the caller verifies and passes to ``Protector.check(challenge_passed=...)``.
    """
    extra: List[Tuple[str, str]] = []
    if result.rate_limit:
        extra.append(("RateLimit", result.rate_limit))
    if result.rate_limit_policy:
        extra.append(("RateLimit-Policy", result.rate_limit_policy))
    return _json_answer(429, "challenge_required", CHALLENGE_MESSAGE, extra)


def _json_answer(status: int, code: str, message: str, extra: List[Tuple[str, str]]) -> Verdict:
    body = (json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":")) + "\n").encode()
    headers = extra + [("Content-Type", "application/json; charset=utf-8"), ("Cache-Control", "no-store")]
    return Verdict(allowed=False, status=status, headers=headers, body=body)


def denial(result: CheckResponse) -> Verdict:
    """The answer to a denied attempt."""
    extra: List[Tuple[str, str]] = []
    if result.rate_limit:
        extra.append(("RateLimit", result.rate_limit))
    if result.rate_limit_policy:
        extra.append(("RateLimit-Policy", result.rate_limit_policy))
    secs = math.ceil(result.retry_after_ms / 1000)
    if secs > 0:
        extra.append(("Retry-After", str(secs)))
    return _json_answer(503 if result.bypassed else 429, "too_many_attempts", denial_message(result), extra)


class Protector:
    """Checks an action for requests of any framework (WSGI, ASGI, others).

    Build a Request (wsgi_request, asgi_request, or by hand), call
    ``check(request, user=...)``, and either go ahead (``verdict.allowed``;
    ``verdict.attempt.report(...)`` afterwards) or answer with the verdict.
    The failure policy defaults to OPEN: a Guard outage lets logins
    through, with ``attempt.result.bypassed`` set.
    """

    def __init__(self, client: Client, action: str, *, ip: Optional[IPExtractor] = None,
                 device_cookie: str = "", device_header: str = "",
                 failure_policy: FailurePolicy = FailurePolicy.OPEN) -> None:
        failure_policy = FailurePolicy(failure_policy)  # "open", "closed" as the enum; "error" refused below
        if failure_policy is FailurePolicy.ERROR:
            raise ValueError("guard: a Protector needs FailurePolicy.OPEN or CLOSED")
        self.client = client
        self.action = action
        self.ip = ip or IPExtractor()
        self.device_cookie = device_cookie
        self.device_header = device_header
        self.failure_policy = failure_policy

    def check(self, request: Request, *, user: Optional[str] = None, phone: Optional[str] = None,
              challenge_passed: bool = False) -> Verdict:
        """Checks the attempt; errors other than unavailability (a wrong key, an unknown action) raise.

        ``phone`` is the attempt's phone number (an OTP's destination), E.164 or
        national in Guard's phone.default_region.

        ``challenge_passed`` says the request proves (verified on the server, e.g.
        a CAPTCHA token checked with its provider) that the person passed the
        challenge an earlier answer asked for; a challenge is answered with
        ``challenge_answer`` and ``verdict.allowed`` false.
        """
        ip = self.ip.client_ip(request.peer, request.values("x-forwarded-for"),
                               (request.values("x-real-ip") or [""])[-1]) or None
        device = None
        if self.device_cookie:
            for raw in request.values("cookie"):
                try:
                    c = SimpleCookie()
                    c.load(raw)
                except CookieError:
                    continue
                if self.device_cookie in c:
                    device = c[self.device_cookie].value or None
                    break
        if device is None and self.device_header:
            device = (request.values(self.device_header) or [""])[0] or None
        user, phone = user or None, phone or None
        try:
            res = self.client.check(self.action, user=user, ip=ip, device=device, phone=phone,
                                    challenge_passed=challenge_passed, failure_policy=self.failure_policy)
        except GuardError as e:
            # An identifier Guard refused came from the end client, and so did
            # one that made the check's body pass Guard's 8 KiB (413 too_large).
            if e.status == 413 or (e.status == 400 and e.field in ("user", "ip", "device", "phone")):
                return _json_answer(400, "invalid_request", "the request is not valid", [])
            raise
        if res.challenge:
            return challenge_answer(res)
        if not res.allowed:
            return denial(res)
        return Verdict(allowed=True, attempt=Attempt(self.action, user, ip, device, res, self.client, phone))
