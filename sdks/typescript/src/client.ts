import type {
  AuditFilter, AuditPage, CheckRequest, CheckResponse, LockRequest, LockResponse, LockoutFilter, LockoutsResponse,
  Policy, Readiness, ReportRequest, ReportResponse, UnlockRequest,
} from "./types.js";

/** What check() does when Guard cannot answer (network error, timeout, 5xx). */
export type FailurePolicy = "error" | "open" | "closed";

/** Defaults of a GuardClient. */
export const DEFAULT_TIMEOUT_MS = 300;
export const DEFAULT_ADMIN_TIMEOUT_MS = 10_000;
export const DEFAULT_RETRIES = 2;
export const DEFAULT_MAX_PENDING_REPORTS = 1024;

const BACKOFF_BASE_MS = 20;
const BACKOFF_MAX_MS = 250;

export interface ClientOptions {
  /** e.g. "http://127.0.0.1:8080". */
  baseUrl: string;
  apiKey: string;
  /** Bounds check() and report(), retries included (default 300 ms). 0: only the caller's signal. */
  timeoutMs?: number;
  /** Bounds the other calls (default 10 s); exportAudit is bounded by its signal only. */
  adminTimeoutMs?: number;
  /** Retries after failures that allow one (default 2). */
  retries?: number;
  /** Default "error" (throw); "open" allows, "closed" denies, both with bypassed set. */
  failurePolicy?: FailurePolicy;
  /** Receives errors of reportInBackground(). */
  onAsyncError?: (err: unknown) => void;
  /** Bound on reports in flight (default 1024); past it a report is dropped and onAsyncError told (a TooManyPendingReportsError). */
  maxPendingReports?: number;
  userAgent?: string;
  /** The fetch to use (default globalThis.fetch). */
  fetch?: typeof fetch;
}

export interface CallOptions {
  signal?: AbortSignal;
}

export interface CheckOptions extends CallOptions {
  /** Overrides the client's failure policy for this call. */
  failurePolicy?: FailurePolicy;
}

/** A non-2xx answer from Guard, or (code "") an answer that is not Guard's: an export whose content type is not the format asked for. */
export class GuardError extends Error {
  readonly status: number;
  /** A contract code (invalid_request, unauthenticated, ...) or "" when the body was not Guard's. */
  readonly code: string;
  /** The input field at fault, or "". */
  readonly field: string;
  /** Parsed Retry-After in ms; 0 when absent. */
  readonly retryAfterMs: number;
  /** The server's request id, or "". */
  readonly requestId: string;

  constructor(status: number, code: string, message: string, field: string, retryAfterMs: number, requestId: string) {
    super(`guard: ${status} ${code}: ${message}${field ? ` (field ${field})` : ""}`);
    this.name = "GuardError";
    this.status = status;
    this.code = code;
    this.field = field;
    this.retryAfterMs = retryAfterMs;
    this.requestId = requestId;
  }
}

/** Guard could not be reached, did not answer in time, or broke off its answer. */
export class GuardUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "GuardUnavailableError";
  }
}

/** What onAsyncError receives for a reportInBackground() dropped because maxPendingReports were in flight. */
export class TooManyPendingReportsError extends Error {
  constructor() {
    super("guard: too many reports pending; report dropped");
    this.name = "TooManyPendingReportsError";
  }
}

/** Whether err says Guard could not answer: what a failure policy applies to. */
export function isUnavailable(err: unknown): boolean {
  return err instanceof GuardUnavailableError || (err instanceof GuardError && err.status >= 500);
}

/** Parses an RFC 9110 Retry-After value (seconds or an HTTP date) into ms; undefined when absent or malformed. */
export function parseRetryAfter(v: string | null, now: number = Date.now()): number | undefined {
  if (v == null || v.trim() === "") return undefined;
  const s = v.trim();
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  const at = Date.parse(s);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

interface Call {
  method: string;
  path: string;
  query?: URLSearchParams;
  body?: unknown;
  timeoutMs: number;
  idempotent: boolean;
  signal?: AbortSignal;
}

/**
 * A client of one Guard server.
 *
 * Every call has a deadline covering all its attempts (timeoutMs for check
 * and report, default 300 ms; adminTimeoutMs for the rest). A call is
 * retried, with jittered exponential backoff, only when that cannot count
 * an attempt twice: GET calls after a network error or a 5xx; any call
 * whose connection could not be made at all. check and report are POSTs
 * that record attempts, so a timeout or a 5xx is not retried for them.
 */
export class GuardClient {
  private readonly base: URL;
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly adminTimeoutMs: number;
  private readonly retries: number;
  private readonly defaultPolicy: FailurePolicy;
  private readonly onAsyncError?: (err: unknown) => void;
  private readonly maxPending: number;
  private readonly userAgent: string;
  private readonly fetch: typeof fetch;
  private readonly pending = new Set<Promise<void>>();

  /**
   * Throws (a TypeError, never a GuardError) when no request of the client
   * could be sent, rather than have every call fail as if Guard were down
   * (which "open" would let through): a baseUrl that is not http: or https:,
   * an apiKey or userAgent holding a control character (or one above
   * U+00FF, which a header cannot carry). White space around
   * apiKey (a key read from a file with its newline) is dropped, as fetch
   * would drop it from the header. Messages never include the key.
   */
  constructor(opts: ClientOptions) {
    this.base = new URL(opts.baseUrl.replace(/\/+$/, "") + "/");
    if (this.base.protocol !== "http:" && this.base.protocol !== "https:") {
      throw new TypeError(`guard: invalid base URL scheme ${JSON.stringify(this.base.protocol)} (want http: or https:)`);
    }
    this.apiKey = opts.apiKey.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
    if (unsendable(this.apiKey)) throw new TypeError("guard: the API key holds a control character (or one above U+00FF) and cannot be sent in a header");
    if (opts.userAgent !== undefined && unsendable(opts.userAgent)) {
      throw new TypeError("guard: the user agent holds a control character (or one above U+00FF) and cannot be sent in a header");
    }
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.adminTimeoutMs = opts.adminTimeoutMs ?? DEFAULT_ADMIN_TIMEOUT_MS;
    this.retries = Math.max(0, opts.retries ?? DEFAULT_RETRIES);
    this.defaultPolicy = opts.failurePolicy ?? "error";
    this.onAsyncError = opts.onAsyncError;
    this.maxPending = Math.max(1, opts.maxPendingReports ?? DEFAULT_MAX_PENDING_REPORTS);
    this.userAgent = opts.userAgent ?? "guard-sdk-typescript";
    this.fetch = opts.fetch ?? globalThis.fetch;
  }

  /**
   * May this attempt go ahead? A denial is a successful call (check
   * result.decision). When Guard cannot answer, the failure policy decides
   * (so it does for a 2xx that is not a check answer: not JSON, or JSON
   * without a decision);
   * a 4xx (the call is wrong) always throws a GuardError, and a call whose
   * opts.signal the caller aborted throws too.
   */
  async check(req: CheckRequest, opts: CheckOptions = {}): Promise<CheckResponse> {
    const policy = opts.failurePolicy ?? this.defaultPolicy;
    try {
      const { body, headers } = await this.do<CheckResponse>({
        method: "POST", path: "v1/check", body: req, timeoutMs: this.timeoutMs, idempotent: false, signal: opts.signal,
      });
      if (typeof body?.decision !== "string" || body.decision === "") {
        // JSON, but no answer of Guard's (another server at the URL): as for
        // an answer that is not JSON at all, Guard did not answer.
        throw new GuardUnavailableError("guard: POST /v1/check answered without a decision: is the URL Guard's?");
      }
      return {
        ...body,
        rateLimit: headers.get("RateLimit") ?? "",
        rateLimitPolicy: headers.get("RateLimit-Policy") ?? "",
        bypassed: false,
      };
    } catch (err) {
      // A caller that aborted its signal stopped waiting: no policy answers
      // for it ("open" would let an unchecked attempt through). A signal
      // that timed out (AbortSignal.timeout) is the caller's deadline:
      // Guard did not answer in time, which the policy answers.
      const gone = opts.signal?.aborted === true && (opts.signal.reason as Error | undefined)?.name !== "TimeoutError";
      if (policy !== "error" && isUnavailable(err) && !gone) {
        return {
          decision: policy === "open" ? "allow" : "deny", reason: "guard_unavailable", retry_after_ms: 0,
          decision_id: "", degraded: false, limits: [], lockout: null, rateLimit: "", rateLimitPolicy: "",
          bypassed: true, cause: err,
        };
      }
      throw err;
    }
  }

  /** How did the attempt end? Bounded like check(). */
  async report(req: ReportRequest, opts: CallOptions = {}): Promise<ReportResponse> {
    return (await this.do<ReportResponse>({
      method: "POST", path: "v1/report", body: req, timeoutMs: this.timeoutMs, idempotent: false, signal: opts.signal,
    })).body;
  }

  /**
   * Sends a report without making the caller wait; errors go to
   * onAsyncError. flush() waits for the reports in flight.
   */
  reportInBackground(req: ReportRequest): void {
    if (this.pending.size >= this.maxPending) {
      this.onAsyncError?.(new TooManyPendingReportsError());
      return;
    }
    const p: Promise<void> = this.report(req).then(
      () => undefined,
      (err) => { this.onAsyncError?.(err); },
    ).finally(() => { this.pending.delete(p); });
    this.pending.add(p);
  }

  /** Waits until every background report has ended. */
  async flush(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  /** One page of the active lockouts matching the filter (scope admin); next_cursor, as filter.cursor, asks for the next. */
  async lockouts(filter: LockoutFilter = {}, opts: CallOptions = {}): Promise<LockoutsResponse> {
    return (await this.get<LockoutsResponse>("v1/lockouts", params(filter), opts)).body;
  }

  /** Lifts a lockout (scope admin); a GuardError 404 not_found when nothing was locked. Not retried. */
  async unlock(req: UnlockRequest, opts: CallOptions = {}): Promise<void> {
    await this.do({ method: "DELETE", path: "v1/lockouts", body: req, timeoutMs: this.adminTimeoutMs, idempotent: false, signal: opts.signal });
  }

  /**
   * Locks a key by hand (scope admin, contract v1.1); answers one entry per
   * ledger locked. A manual lockout is not a strike: level stays the key's and
   * until is the later of this end and a struck one. Not retried, like unlock.
   */
  async lock(req: LockRequest, opts: CallOptions = {}): Promise<LockResponse> {
    return (await this.do<LockResponse>({
      method: "POST", path: "v1/lockouts", body: req, timeoutMs: this.adminTimeoutMs, idempotent: false, signal: opts.signal,
    })).body;
  }

  /** The effective policy (scope admin). */
  async policy(opts: CallOptions = {}): Promise<Policy> {
    return (await this.get<Policy>("v1/policy", undefined, opts)).body;
  }

  /** One page of audit events, newest first (scope audit:read). */
  async audit(filter: AuditFilter = {}, opts: CallOptions = {}): Promise<AuditPage> {
    return (await this.get<AuditPage>("v1/audit", auditParams(filter), opts)).body;
  }

  /**
   * Every event matching the filter as NDJSON or CSV text; bounded by the signal only. A
   * transfer Guard or the network breaks off (Guard cuts an export whose store fails mid-way)
   * throws a GuardUnavailableError, never a short text.
   */
  async exportAudit(filter: AuditFilter, format: "ndjson" | "csv", opts: CallOptions = {}): Promise<string> {
    const accept = format === "ndjson" ? "application/x-ndjson" : format === "csv" ? "text/csv" : "";
    if (!accept) throw new Error(`guard: unknown export format ${JSON.stringify(format)} (want "ndjson" or "csv")`);
    const { limit: _ignored, ...rest } = filter;
    const resp = await this.send({ method: "GET", path: "v1/audit", query: auditParams(rest), timeoutMs: 0, idempotent: false, signal: opts.signal }, accept);
    if (!resp.ok) throw await errorFrom(resp);
    // A proxy's sign-in page or another server at the URL answers 200 too.
    const got = resp.headers.get("content-type") ?? "";
    if ((got.split(";")[0] ?? "").trim().toLowerCase() !== accept) {
      await resp.body?.cancel();
      throw new GuardError(resp.status, "", `the server answered ${JSON.stringify(got.slice(0, 64))}, not ${accept}: is the URL Guard's?`, "", 0, resp.headers.get("x-request-id") ?? "");
    }
    try {
      return await resp.text();
    } catch (err) {
      // Guard cuts an export whose store fails mid-way, or the connection broke.
      throw new GuardUnavailableError(`guard: export audit: ${describe(err)}`, { cause: err });
    }
  }

  /** The server's readiness (no key needed). */
  async ready(opts: CallOptions = {}): Promise<Readiness> {
    return (await this.get<Readiness>("readyz", undefined, opts)).body;
  }

  /**
   * Whether the Guard process serves (GET /healthz, no key needed): resolves
   * on Guard's 200 {"status": "ok"}; throws a GuardError for another status
   * (and, with code "", for a 200 that is not Guard's: another server at the
   * URL), a GuardUnavailableError when Guard cannot be reached. Bounded and
   * retried like the admin calls. Unlike ready() it says nothing of Redis or
   * Postgres: use it for liveness.
   */
  async health(opts: CallOptions = {}): Promise<void> {
    const { body, headers } = await this.get<{ status?: unknown } | null>("healthz", undefined, opts);
    if (body?.status !== "ok") {
      throw new GuardError(200, "", `/healthz answered ${JSON.stringify(body).slice(0, 64)}, not status "ok": is the URL Guard's?`,
        "", 0, headers.get("x-request-id") ?? "");
    }
  }

  private get<T>(path: string, query: URLSearchParams | undefined, opts: CallOptions) {
    return this.do<T>({ method: "GET", path, query, timeoutMs: this.adminTimeoutMs, idempotent: true, signal: opts.signal });
  }

  private async send(k: Call, accept: string, signal?: AbortSignal): Promise<Response> {
    const url = new URL(k.path, this.base);
    if (k.query) url.search = k.query.toString();
    const headers: Record<string, string> = { Accept: accept, "User-Agent": this.userAgent };
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    let body: string | undefined;
    if (k.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(k.body);
    }
    try {
      return await this.fetch(url, { method: k.method, headers, body, signal: signal ?? k.signal });
    } catch (err) {
      throw new GuardUnavailableError(`guard: ${k.method} /${k.path}: ${describe(err)}`, { cause: err });
    }
  }

  private async do<T>(k: Call): Promise<{ body: T; headers: Headers }> {
    const signals: AbortSignal[] = [];
    if (k.signal) signals.push(k.signal);
    if (k.timeoutMs > 0) signals.push(AbortSignal.timeout(k.timeoutMs));
    const signal = signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);
    const deadline = k.timeoutMs > 0 ? Date.now() + k.timeoutMs : Infinity;
    for (let attempt = 0; ; attempt++) {
      let err: unknown;
      let retry = false;
      try {
        const resp = await this.send(k, "application/json", signal);
        if (resp.ok) {
          try {
            return { body: (await resp.json()) as T, headers: resp.headers };
          } catch (e) {
            throw new GuardUnavailableError(`guard: decode ${k.method} /${k.path} answer: ${describe(e)}`, { cause: e });
          }
        }
        err = await errorFrom(resp);
        retry = k.idempotent && resp.status >= 500;
      } catch (e) {
        if (!(e instanceof GuardUnavailableError)) throw e;
        err = e;
        retry = !signal?.aborted && (k.idempotent || notSent(e));
      }
      if (!retry || attempt >= this.retries || signal?.aborted) throw err;
      const wait = 1 + Math.floor(Math.random() * Math.min(BACKOFF_BASE_MS * 2 ** attempt, BACKOFF_MAX_MS));
      if (Date.now() + wait >= deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

/**
 * Whether s holds a character fetch cannot put in a header value: a control
 * character other than a tab, DEL, or one above U+00FF (a header is bytes).
 */
function unsendable(s: string): boolean {
  return /[^\t\u0020-\u007e\u0080-\u00ff]/.test(s);
}

/** The connection could not be made: nothing was sent, so a retry counts nothing twice. */
function notSent(err: GuardUnavailableError): boolean {
  let c: unknown = err.cause;
  for (let i = 0; i < 4 && c; i++) {
    const code = (c as { code?: string }).code;
    if (code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "UND_ERR_CONNECT_TIMEOUT") return true;
    c = (c as { cause?: unknown }).cause;
  }
  return false;
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
    return err.message + cause;
  }
  return String(err);
}

async function errorFrom(resp: Response): Promise<GuardError> {
  let code = "", message = resp.statusText || `status ${resp.status}`, field = "";
  let requestId = resp.headers.get("X-Request-Id") ?? "";
  try {
    const text = (await resp.text()).slice(0, 64 << 10);
    const b = JSON.parse(text) as { error?: { code?: string; message?: string; field?: string; request_id?: string } };
    if (b.error?.code) {
      code = b.error.code;
      message = b.error.message ?? "";
      field = b.error.field ?? "";
      requestId = b.error.request_id || requestId;
    }
  } catch {
    // not Guard's error body: status text only
  }
  return new GuardError(resp.status, code, message, field, parseRetryAfter(resp.headers.get("Retry-After")) ?? 0, requestId);
}

function params(o: object): URLSearchParams {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  return q;
}

function auditParams(f: AuditFilter): URLSearchParams {
  const { since, until, ...rest } = f;
  const q = params(rest);
  if (since !== undefined) q.set("since", since instanceof Date ? since.toISOString() : since);
  if (until !== undefined) q.set("until", until instanceof Date ? until.toISOString() : until);
  return q;
}
