from __future__ import annotations

import enum
import functools
import http.client
import io
import json
import os
import random
import re
import select
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union
from urllib.parse import urlencode, urlsplit

from ._errors import GuardError, GuardUnavailableError, TooManyPendingReports, is_unavailable
from ._types import (ALLOW, DENY, REASON_GUARD_UNAVAILABLE, AuditPage, CheckResponse, LockoutEntry, LockoutPage,
                     Readiness, ReportResponse)

#: Bounds check() and report(), retries included, in seconds.
DEFAULT_TIMEOUT = 0.3
#: Bounds the other calls, retries included, in seconds.
DEFAULT_ADMIN_TIMEOUT = 10.0
DEFAULT_RETRIES = 2
DEFAULT_MAX_PENDING_REPORTS = 1024
#: Idle keep-alive connections kept per Client.
DEFAULT_MAX_IDLE_CONNECTIONS = 8
#: An idle connection older than this (seconds) is closed rather than reused:
#: well under Guard's own idle timeout (2 min) and common proxies' (60 s), so
#: a request seldom meets a connection the server is closing at that moment.
DEFAULT_IDLE_TIMEOUT = 30.0

_BACKOFF_BASE = 0.02
_BACKOFF_MAX = 0.25
_MAX_ERROR_BODY = 64 << 10


class FailurePolicy(str, enum.Enum):
    """What check() does when Guard cannot answer (network error, timeout, 5xx)."""

    ERROR = "error"    #: raise
    OPEN = "open"      #: allow, with bypassed set
    CLOSED = "closed"  #: deny, with bypassed set


def parse_retry_after(v: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """RFC 9110 Retry-After (seconds or an HTTP date) in seconds; None when absent or malformed."""
    if not v or not v.strip():
        return None
    v = v.strip()
    if v.isdigit():
        return float(v)
    try:
        at = parsedate_to_datetime(v).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, at - (time.time() if now is None else now))


class _DeadlineReader(io.RawIOBase):
    """Reads a socket with what remains until deadline as each read's timeout.

    A socket timeout alone bounds each read, so a server that sends its answer
    a byte at a time would hold a call far past its deadline.
    """

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        # The socket's own file keeps it open after the connection closes it,
        # as http.client expects of a response's file.
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline
        #: Bytes received so far: 0 means the server sent nothing of an answer.
        self.received = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> Optional[int]:
        if self._deadline != float("inf"):
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out")
            self._sock.settimeout(remaining)
        n = self._raw.readinto(b)
        if n:
            self.received += n
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    """An HTTPResponse whose reads, headers included, all end by deadline."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # nothing read from it yet
        self.reader = _DeadlineReader(sock, deadline)
        self.fp = io.BufferedReader(self.reader)


def _idle_and_open(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection can take a request: nothing to read on it.

    An idle connection has nothing to read unless the server closed it (EOF or
    a reset: idle timeout, restart) or sent something unasked; either way it
    is not reused, and nothing was sent on it.
    """
    sock = conn.sock
    if sock is None:
        return False
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        fd = sock.fileno()
        if fd < 0:
            return False
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(fd, select.POLLIN | select.POLLPRI)
            return not p.poll(0)
        r, _, x = select.select([fd], [], [fd], 0)
        return not r and not x
    except (OSError, ValueError):
        return False


_UNSENDABLE = re.compile(r"[^\t\x20-\x7e\x80-\xff]")


def _unsendable(v: str) -> bool:
    """Whether v holds a character an HTTP header value cannot carry (a control character other
    than a tab, DEL, or one above U+00FF: http.client sends headers as Latin-1)."""
    return _UNSENDABLE.search(v) is not None


def _whole(v: Any) -> Any:
    """An integer field as the wire wants it: a float without a fraction (2.0, which arithmetic
    on floats gives and json.dumps would write as 2.0, refused by Guard) as the int it names.
    Anything else goes as it is, for Guard to refuse with that field."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _drop_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _wire_time(t: datetime) -> str:
    """t as times are on the wire: RFC 3339 with milliseconds, UTC (naive: local time, as astimezone reads it)."""
    u = t.astimezone(timezone.utc)
    return u.strftime("%Y-%m-%dT%H:%M:%S.") + f"{u.microsecond // 1000:03d}Z"


def _audit_query(filters: Mapping[str, Any]) -> Dict[str, Any]:
    q = _drop_none(filters)
    if "limit" in q:
        q["limit"] = _whole(q["limit"])
    for k in ("since", "until"):
        if isinstance(q.get(k), datetime):
            q[k] = _wire_time(q[k])
    return q


class Client:
    """A client of one Guard server; safe to share between threads.

    Every call has a deadline covering all its attempts (``timeout`` for
    check and report, default 0.3 s; ``admin_timeout`` for the rest). A call
    is retried, with jittered exponential backoff, only when that cannot
    count an attempt twice: GET calls after a network error or a 5xx; any
    call whose connection could not be made. check and report record
    attempts, so a timeout or a 5xx is not retried for them.

    A ``base_url`` that is not http or https, and an ``api_key`` or ``user_agent`` that no
    HTTP header can carry (a control character), raise ValueError here; white space around the
    key is dropped.

    Connections are kept alive and reused: up to ``max_idle_connections``
    (default 8) idle ones, each closed once idle for ``idle_timeout`` seconds
    (default 30). A pooled connection the server has closed is noticed before
    anything is sent on it; one that fails after the request went out is
    retried once on a new connection only for GET calls.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = DEFAULT_TIMEOUT,
                 admin_timeout: float = DEFAULT_ADMIN_TIMEOUT, retries: int = DEFAULT_RETRIES,
                 failure_policy: FailurePolicy = FailurePolicy.ERROR,
                 on_async_error: Optional[Callable[[BaseException], None]] = None,
                 max_pending_reports: int = DEFAULT_MAX_PENDING_REPORTS,
                 user_agent: str = "guard-sdk-python",
                 ssl_context: Optional[ssl.SSLContext] = None,
                 max_idle_connections: int = DEFAULT_MAX_IDLE_CONNECTIONS,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> None:
        u = urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"guard: invalid base URL {base_url!r}")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path
        # White space around the key (a key file's newline) is no part of it: no header value
        # carries it. A character no header can carry would fail every call, in http.client's
        # words, which quote the whole header (and so the key): refuse it here, without the key.
        self._api_key = api_key.strip(" \t\r\n")
        if _unsendable(self._api_key):
            raise ValueError("guard: the API key holds a control character (or one above U+00FF) "
                             "and cannot be sent in a header")
        if _unsendable(user_agent):
            raise ValueError("guard: the user agent holds a control character (or one above U+00FF) "
                             "and cannot be sent in a header")
        self._timeout = timeout
        self._admin_timeout = admin_timeout
        self._retries = max(0, retries)
        self._policy = FailurePolicy(failure_policy)
        self._on_async_error = on_async_error
        self._max_pending = max(1, max_pending_reports)
        self._agent = user_agent
        self._ssl = ssl_context
        self._pending = 0
        self._lock = threading.Condition()
        self._pool: Optional[ThreadPoolExecutor] = None
        # Idle keep-alive connections, newest last; each in use by one request at a time.
        self._max_idle = max(0, max_idle_connections)
        self._idle_timeout = idle_timeout
        self._conns_lock = threading.Lock()
        self._idle: List[Tuple[http.client.HTTPConnection, float]] = []
        self._conns_pid = os.getpid()

    # --- decisions -------------------------------------------------------

    def check(self, action: str, *, user: Optional[str] = None, ip: Optional[str] = None,
              device: Optional[str] = None, phone: Optional[str] = None, cost: Optional[int] = None,
              dry_run: bool = False, challenge_passed: bool = False,
              failure_policy: Optional[FailurePolicy] = None) -> CheckResponse:
        """May this attempt go ahead? A denial is a successful call: look at ``.allowed``.

        A ``.challenge`` answer asks the caller to challenge the person (CAPTCHA,
        step-up MFA); once passed, check again with ``challenge_passed=True``.

        When Guard cannot answer, the failure policy decides (the client's, or
        ``failure_policy`` for this call), and so it does for a 2xx that is not a check
        answer (not JSON, or JSON without a decision); a 4xx always raises GuardError.

        ``cost`` may be a float without a fraction (``2.0``): it is sent as the integer it
        names, which Guard requires (``json.dumps`` would write ``2.0``, a 400).
        """
        policy = FailurePolicy(failure_policy) if failure_policy is not None else self._policy
        body = _drop_none({"action": action, "user": user, "ip": ip, "device": device, "phone": phone,
                           "cost": _whole(cost)})
        if dry_run:
            body["dry_run"] = True
        if challenge_passed:
            body["challenge_passed"] = True
        try:
            data, headers = self._do("POST", "/v1/check", body=body, timeout=self._timeout, idempotent=False)
            if not isinstance(data, dict) or not isinstance(data.get("decision"), str) or not data["decision"]:
                # JSON, but no answer of Guard's (another server at the URL): as for an
                # answer that is not JSON at all, Guard did not answer.
                raise GuardUnavailableError("guard: POST /v1/check answered without a decision: is the URL Guard's?")
        except Exception as err:  # noqa: BLE001 - the policy decides which
            if policy is not FailurePolicy.ERROR and is_unavailable(err):
                return CheckResponse(decision=ALLOW if policy is FailurePolicy.OPEN else DENY,
                                     reason=REASON_GUARD_UNAVAILABLE, bypassed=True, cause=err)
            raise
        res = CheckResponse.from_wire(data)
        res.rate_limit = headers.get("ratelimit", "")
        res.rate_limit_policy = headers.get("ratelimit-policy", "")
        return res

    def report(self, action: str, outcome: str, *, user: Optional[str] = None, ip: Optional[str] = None,
               device: Optional[str] = None, phone: Optional[str] = None,
               decision_id: Optional[str] = None) -> ReportResponse:
        """How did the attempt end? ``outcome`` is "success" or "failure"."""
        body = _drop_none({"action": action, "user": user, "ip": ip, "device": device, "phone": phone,
                           "outcome": outcome, "decision_id": decision_id or None})
        data, _ = self._do("POST", "/v1/report", body=body, timeout=self._timeout, idempotent=False)
        return ReportResponse.from_wire(data)

    def report_in_background(self, action: str, outcome: str, **kwargs: Any) -> None:
        """report() on a worker thread; errors go to on_async_error. flush() waits for them."""
        with self._lock:
            full = self._pending >= self._max_pending
            if not full:
                self._pending += 1
        if full:
            self._async_error(TooManyPendingReports("guard: too many reports pending; report dropped"))
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="guard-report")
            pool = self._pool

        def run() -> None:
            try:
                self.report(action, outcome, **kwargs)
            except Exception as err:  # noqa: BLE001 - handed to the caller's handler
                self._async_error(err)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._lock.notify_all()

        pool.submit(run)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until background reports have ended; False if timeout (seconds) ran out first."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Waits for background reports, stops their threads and closes idle connections.

        The client stays usable: a later call opens a new connection (and
        report_in_background new threads).
        """
        self.flush()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._conns_lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def __del__(self) -> None:
        # A client dropped without close(): its idle sockets go with it, not to the GC's warnings.
        for conn, _ in getattr(self, "_idle", ()):
            conn.close()

    # --- admin -----------------------------------------------------------

    def lockouts(self, *, user: Optional[str] = None, ip: Optional[str] = None, device: Optional[str] = None,
                 phone: Optional[str] = None, dimension: Optional[str] = None, ledger: Optional[str] = None,
                 limit: Optional[int] = None, cursor: Optional[str] = None) -> LockoutPage:
        """One page of the active lockouts matching the filter (scope admin).

        ``limit`` is the page size (1 to 1000, default 100; a float without a fraction counts as
        its int, as ``cost`` and ``duration_ms`` do); the answer is a list of its entries
        whose ``next_cursor``, passed as ``cursor``, asks for the next page (None: no more).
        """
        q = _drop_none({"user": user, "ip": ip, "device": device, "phone": phone, "dimension": dimension,
                        "ledger": ledger, "limit": _whole(limit), "cursor": cursor})
        data, _ = self._get("/v1/lockouts", q)
        return LockoutPage((LockoutEntry.from_wire(e) for e in data["lockouts"]), data.get("next_cursor"))

    def unlock(self, dimension: str, *, user: Optional[str] = None, ip: Optional[str] = None,
               device: Optional[str] = None, phone: Optional[str] = None, phone_country: Optional[str] = None,
               phone_prefix: Optional[str] = None, ledger: Optional[str] = None,
               reason: Optional[str] = None) -> None:
        """Lifts a lockout (scope admin); GuardError 404 not_found when nothing was locked. Not retried.

        For phone_country and phone_prefix lockouts, ``phone`` is any number in that country or
        prefix; or give the key's value as listed (``phone_country="GB"``, ``phone_prefix="+447400"``).
        """
        body = _drop_none({"dimension": dimension, "user": user, "ip": ip, "device": device, "phone": phone,
                           "phone_country": phone_country, "phone_prefix": phone_prefix,
                           "ledger": ledger, "reason": reason})
        self._do("DELETE", "/v1/lockouts", body=body, timeout=self._admin_timeout, idempotent=False)

    def lock(self, dimension: str, duration_ms: Union[int, timedelta], *, user: Optional[str] = None,
             ip: Optional[str] = None, device: Optional[str] = None, phone: Optional[str] = None,
             phone_country: Optional[str] = None,
             phone_prefix: Optional[str] = None, ledger: Optional[str] = None,
             reason: Optional[str] = None) -> List[LockoutEntry]:
        """Locks a key for duration_ms (1 s to 30 days; or a timedelta, in whole milliseconds) by hand
        (scope admin); not retried, like unlock.

        Returns one entry per ledger locked (``ledger`` names one; default: every ledger with a
        lockout ladder). A manual lockout is not a strike: ``level`` stays the key's (0 without
        strikes) and ``until`` is the later of this end and a struck one. Identifiers as in unlock.
        """
        if isinstance(duration_ms, timedelta):
            duration_ms = duration_ms // timedelta(milliseconds=1)
        body = _drop_none({"dimension": dimension, "user": user, "ip": ip, "device": device, "phone": phone,
                           "phone_country": phone_country, "phone_prefix": phone_prefix,
                           "duration_ms": _whole(duration_ms), "ledger": ledger, "reason": reason})
        data, _ = self._do("POST", "/v1/lockouts", body=body, timeout=self._admin_timeout, idempotent=False)
        return [LockoutEntry.from_wire(e) for e in data["lockouts"]]

    def policy(self) -> Dict[str, Any]:
        """The effective policy (scope admin), as JSON."""
        return self._get("/v1/policy")[0]

    def audit(self, **filters: Any) -> AuditPage:
        """One page of audit events, newest first (scope audit:read): a list of AuditEvent with
        ``next_cursor`` (None on the last page; pass it as ``cursor`` for the next).

        ``since`` (inclusive) and ``until`` (exclusive) take a datetime or an RFC 3339 string.
        """
        return AuditPage.from_wire(self._get("/v1/audit", _audit_query(filters))[0])

    def export_audit(self, fmt: str = "ndjson", timeout: Optional[float] = None, **filters: Any) -> str:
        """Every matching event as NDJSON or CSV text (no page limit).

        ``timeout`` (seconds, default 300) bounds the connection and each read, not the whole
        transfer, which takes as long as the trail is long.
        """
        accept = {"ndjson": "application/x-ndjson", "csv": "text/csv"}.get(fmt)
        if accept is None:
            raise ValueError(f"guard: unknown export format {fmt!r} (want 'ndjson' or 'csv')")
        filters.pop("limit", None)
        status, headers, body = self._once("GET", "/v1/audit", _audit_query(filters), None,
                                           time.monotonic() + (timeout or 300.0), accept, per_read=True,
                                           idempotent=True)
        if status // 100 != 2:
            raise self._error(status, headers, body)
        # A proxy's sign-in page or another server at the URL answers 200 too.
        got = headers.get("content-type", "").split(";")[0].strip().lower()
        if got != accept:
            raise GuardError(status, "", f"the server answered {headers.get('content-type', '')[:64]!r}, "
                             f"not {accept}: is the URL Guard's?")
        return body.decode("utf-8")

    def ready(self) -> Readiness:
        """The server's readiness (no key needed)."""
        return Readiness.from_wire(self._get("/readyz")[0])

    def health(self) -> None:
        """Whether the Guard process serves (GET /healthz, no key needed): returns on Guard's
        200 {"status": "ok"}.

        Raises GuardError for another status (with code "" for a 200 that is not Guard's:
        another server at the URL) and GuardUnavailableError when Guard cannot be reached.
        Bounded and retried like the admin calls. Unlike ready() it says nothing of Redis or
        Postgres: use it for liveness.
        """
        data, headers = self._get("/healthz")
        if not isinstance(data, dict) or data.get("status") != "ok":
            raise GuardError(200, "", f"/healthz answered {json.dumps(data)[:64]}, not status \"ok\": is the URL Guard's?",
                             request_id=headers.get("x-request-id", ""))

    # --- transport -------------------------------------------------------

    def _get(self, path: str, query: Optional[Mapping[str, Any]] = None) -> Tuple[Any, Dict[str, str]]:
        return self._do("GET", path, query=query, timeout=self._admin_timeout, idempotent=True)

    def _do(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None, body: Any = None,
            timeout: float, idempotent: bool) -> Tuple[Any, Dict[str, str]]:
        deadline = time.monotonic() + timeout if timeout > 0 else float("inf")
        attempt = 0
        while True:
            retry = False
            try:
                status, headers, raw = self._once(method, path, query, body, deadline, "application/json",
                                                  idempotent=idempotent)
                if status // 100 == 2:
                    try:
                        return json.loads(raw.decode("utf-8")), headers
                    except ValueError as e:
                        raise GuardUnavailableError(f"guard: decode {method} {path} answer: {e}") from e
                err: Exception = self._error(status, headers, raw)
                retry = idempotent and status >= 500
            except _NotSent as e:
                err, retry = e.err, True
            except GuardUnavailableError as e:
                err, retry = e, idempotent
            if not retry or attempt >= self._retries:
                raise err
            wait = random.uniform(0.001, min(_BACKOFF_BASE * (2 ** attempt), _BACKOFF_MAX))
            if time.monotonic() + wait >= deadline:
                raise err
            time.sleep(wait)
            attempt += 1

    def _once(self, method: str, path: str, query: Optional[Mapping[str, Any]], body: Any,
              deadline: float, accept: str, per_read: bool = False,
              idempotent: bool = False) -> Tuple[int, Dict[str, str], bytes]:
        """One request, over by deadline; with per_read, deadline - now bounds the connection
        and each read instead (an export streams for as long as it takes).

        It goes over an idle pooled connection when one is left open, else a new one. A
        reused connection that breaks before any byte of the answer arrived (the server
        closed it as the request went out) is retried once on a new connection, for an
        idempotent call only: a POST may have been received, and is never sent twice.
        """
        target = self._prefix + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": accept, "User-Agent": self._agent}
        if self._api_key:
            headers["Authorization"] = "Bearer " + self._api_key
        payload = None
        if body is not None:
            payload = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        fresh = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GuardUnavailableError(f"guard: {method} {path}: timed out")
            timeout = None if remaining == float("inf") else remaining
            conn = None if fresh else self._take()
            reused = conn is not None
            if conn is None:
                conn = self._connect(method, path, timeout)
            made: List[_DeadlineResponse] = []
            read_deadline = float("inf") if per_read else deadline

            def response(sock: socket.socket, *args: Any, **kwargs: Any) -> _DeadlineResponse:
                r = _DeadlineResponse(sock, *args, deadline=read_deadline, **kwargs)
                made.append(r)
                return r

            conn.response_class = response  # type: ignore[assignment]
            try:
                if reused:
                    assert conn.sock is not None
                    conn.sock.settimeout(timeout)
                conn.request(method, target, body=payload, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                nothing_back = not made or made[0].reader.received == 0
                if reused and idempotent and nothing_back and isinstance(e, ConnectionError):
                    fresh = True  # RemoteDisconnected, reset, broken pipe: the server closed it
                    continue
                raise GuardUnavailableError(f"guard: {method} {path}: {e or type(e).__name__}") from e
            except BaseException:
                conn.close()
                raise
            status, got = resp.status, {k.lower(): v for k, v in resp.getheaders()}
            if resp.isclosed() and not resp.will_close and conn.sock is not None:
                self._put(conn)  # the answer was read to its end
            else:
                conn.close()
            return status, got, data

    def _connect(self, method: str, path: str, timeout: Optional[float]) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        conn.auto_open = 0  # a connection is opened here only, where a failure is known to send nothing
        try:
            conn.connect()
        except (ConnectionRefusedError, socket.gaierror) as e:
            conn.close()
            raise _NotSent(GuardUnavailableError(f"guard: {method} {path}: {e}")) from e
        except OSError as e:  # includes socket.timeout
            conn.close()
            raise GuardUnavailableError(f"guard: {method} {path}: {e}") from e
        except BaseException:
            conn.close()
            raise
        return conn

    def _take(self) -> Optional[http.client.HTTPConnection]:
        """The newest idle connection still open, or None; closes the stale ones it passes."""
        stale: List[http.client.HTTPConnection] = []
        found = None
        now = time.monotonic()
        with self._conns_lock:
            if self._conns_pid != os.getpid():
                # A forked child: the parent's connections are not this process's to use.
                stale = [c for c, _ in self._idle]
                self._idle, self._conns_pid = [], os.getpid()
            while self._idle:
                conn, since = self._idle.pop()
                if now - since <= self._idle_timeout and _idle_and_open(conn):
                    found = conn
                    break
                stale.append(conn)
        for conn in stale:
            conn.close()
        return found

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._conns_lock:
            if self._conns_pid == os.getpid() and len(self._idle) < self._max_idle:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    @staticmethod
    def _error(status: int, headers: Mapping[str, str], raw: bytes) -> GuardError:
        code, message, field = "", http.client.responses.get(status, f"status {status}"), ""
        request_id = headers.get("x-request-id", "")
        try:
            b = json.loads(raw[:_MAX_ERROR_BODY].decode("utf-8"))
            e = b.get("error") if isinstance(b, dict) else None
            if isinstance(e, dict) and e.get("code"):
                code, message, field = e["code"], e.get("message", ""), e.get("field", "")
                request_id = e.get("request_id") or request_id
        except ValueError:
            pass
        return GuardError(status, code, message, field, parse_retry_after(headers.get("retry-after")), request_id)

    def _async_error(self, err: BaseException) -> None:
        if self._on_async_error is not None:
            self._on_async_error(err)


class _NotSent(Exception):
    """The connection could not be made: nothing was sent, so any call may be retried."""

    def __init__(self, err: GuardUnavailableError) -> None:
        super().__init__(str(err))
        self.err = err
