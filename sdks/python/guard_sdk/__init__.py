"""Guard's Python SDK: a client of the Guard HTTP API and a framework-agnostic request helper.

Standard library only; Python 3.9+.
"""

from ._client import (DEFAULT_ADMIN_TIMEOUT, DEFAULT_MAX_PENDING_REPORTS, DEFAULT_RETRIES, DEFAULT_TIMEOUT,
                      Client, FailurePolicy, parse_retry_after)
from ._errors import GuardError, GuardUnavailableError, TooManyPendingReports, is_unavailable
from ._ip import IPExtractor, parse_hop
from ._protect import (CHALLENGE_MESSAGE, Attempt, Protector, Request, Verdict, asgi_request, challenge_answer,
                       denial, denial_message, wsgi_request)
from ._types import (ALLOW, CHALLENGE, DENY, FAILURE, REASON_GUARD_UNAVAILABLE, SUCCESS, AuditEvent, AuditPage,
                     CheckResponse, Limit, Lockout, LockoutEntry, LockoutPage, Readiness, ReportResponse)
from ._webhook import (DEFAULT_WEBHOOK_TOLERANCE, SIGNATURE_HEADER, Notification, WebhookVerificationError,
                       sign_webhook, verify_webhook)

__all__ = [
    "ALLOW", "CHALLENGE", "CHALLENGE_MESSAGE", "challenge_answer", "DENY", "FAILURE", "REASON_GUARD_UNAVAILABLE", "SUCCESS",
    "DEFAULT_ADMIN_TIMEOUT", "DEFAULT_MAX_PENDING_REPORTS", "DEFAULT_RETRIES", "DEFAULT_TIMEOUT",
    "Attempt", "AuditEvent", "AuditPage", "CheckResponse", "Client", "FailurePolicy", "GuardError", "GuardUnavailableError",
    "IPExtractor", "Limit", "Lockout", "LockoutEntry", "LockoutPage", "Protector", "Readiness", "ReportResponse", "Request",
    "TooManyPendingReports", "Verdict", "asgi_request", "denial", "denial_message", "is_unavailable",
    "parse_hop", "parse_retry_after", "wsgi_request",
    "DEFAULT_WEBHOOK_TOLERANCE", "Notification", "SIGNATURE_HEADER", "WebhookVerificationError", "sign_webhook",
    "verify_webhook",
]
