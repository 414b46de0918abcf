from __future__ import annotations

from typing import Optional


class GuardError(Exception):
    """A non-2xx answer from Guard, or (code "") an answer that is not Guard's: an export whose
    content type is not the format asked for."""

    def __init__(self, status: int, code: str, message: str, field: str = "",
                 retry_after: Optional[float] = None, request_id: str = "") -> None:
        super().__init__(f"guard: {status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        #: A contract code (invalid_request, unauthenticated, ...) or "" when the body was not Guard's.
        self.code = code
        self.message = message
        #: The input field at fault, or "".
        self.field = field
        #: Parsed Retry-After in seconds, None when absent.
        self.retry_after = retry_after
        self.request_id = request_id


class GuardUnavailableError(Exception):
    """Guard could not be reached, did not answer in time, or broke off its answer."""


class TooManyPendingReports(Exception):
    """A background report was dropped: too many were in flight."""


def is_unavailable(err: BaseException) -> bool:
    """Whether err says Guard could not answer: what a failure policy applies to."""
    return isinstance(err, GuardUnavailableError) or (isinstance(err, GuardError) and err.status >= 500)
