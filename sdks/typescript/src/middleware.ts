import type { IncomingMessage, ServerResponse } from "node:http";
import { GuardClient, GuardError, type FailurePolicy } from "./client.js";
import { IPExtractor, type RequestLike } from "./ip.js";
import type { CheckRequest, CheckResponse, Outcome, ReportRequest } from "./types.js";

/** Who makes an attempt; empty fields are left out of the request. */
export interface Subject {
  user?: string;
  ip?: string;
  device?: string;
  phone?: string;
}

/** The check request of subject for action, without empty identifiers. */
export function checkRequest(action: string, s: Subject): CheckRequest {
  const r: CheckRequest = { action };
  if (s.user) r.user = s.user;
  if (s.ip) r.ip = s.ip;
  if (s.device) r.device = s.device;
  if (s.phone) r.phone = s.phone;
  return r;
}

/** The report of subject for action; carries check's decision id unless it was bypassed. */
export function reportRequest(action: string, s: Subject, outcome: Outcome, check?: CheckResponse): ReportRequest {
  const r: ReportRequest = { ...checkRequest(action, s), outcome };
  if (check && !check.bypassed && check.decision_id) r.decision_id = check.decision_id;
  return r;
}

/** One checked attempt, on req.guard for the handler. */
export class Attempt {
  constructor(
    readonly action: string,
    readonly subject: Subject,
    readonly result: CheckResponse,
    private readonly client: GuardClient,
  ) {}

  /**
   * Reports how the attempt ended, in the background. Report failures for
   * unknown accounts too, or lockouts tell which accounts exist.
   */
  report(outcome: Outcome): void {
    this.client.reportInBackground(reportRequest(this.action, this.subject, outcome, this.result));
  }
}

type Req = IncomingMessage & RequestLike & { guard?: Attempt };

export interface MiddlewareOptions<R = Req> {
  client: GuardClient;
  action: string;
  /** The account identifier of the attempt, e.g. (req) => req.body?.email. */
  user?: (req: R) => string | undefined;
  /** The phone number of the attempt (e.g. an OTP's destination), e.g. (req) => req.body?.phone. */
  phone?: (req: R) => string | undefined;
  /** Finds the client address; default: the peer (no proxy trusted). */
  ip?: IPExtractor;
  deviceCookie?: string;
  deviceHeader?: string;
  /** Default "open": a Guard outage lets logins through (result.bypassed). "closed" answers 503. */
  failurePolicy?: Exclude<FailurePolicy, "error">;
  /** Answers a denied attempt (default writeDenial). */
  onDeny?: (req: R, res: ServerResponse, result: CheckResponse) => void;
  /**
   * Whether req proves the person passed the challenge an earlier answer
   * asked for (e.g. a CAPTCHA token you verified with its provider). Verify
   * on the server: a client's say-so is no proof. Default: never.
   */
  challengePassed?: (req: R) => boolean | Promise<boolean>;
  /** Answers an attempt Guard wants challenged (default writeChallenge); the handler never sees it. */
  onChallenge?: (req: R, res: ServerResponse, result: CheckResponse) => void;
}

/**
 * Express-style middleware ((req, res, next)) that checks an action before
 * the handler: allowed attempts reach it with req.guard (an Attempt);
 * denied ones get 429 with Retry-After, RateLimit, RateLimit-Policy and a
 * generic message (denialMessage) that names no rule, limit or account.
 * Errors no policy covers go to next(err), except identifiers Guard
 * refused or found too large for a check (from the end client), answered
 * 400.
 */
export function guardMiddleware<R extends Req = Req>(opts: MiddlewareOptions<R>) {
  const ip = opts.ip ?? new IPExtractor();
  const policy = opts.failurePolicy ?? "open";
  return async function guard(req: R, res: ServerResponse, next: (err?: unknown) => void): Promise<void> {
    const subject: Subject = { ip: ip.clientIP(req), user: opts.user?.(req) || undefined };
    const phone = opts.phone?.(req);
    if (phone) subject.phone = phone;
    const cookie = opts.deviceCookie ? cookieValue(req.headers.cookie, opts.deviceCookie) : "";
    const hdr = opts.deviceHeader ? req.headers[opts.deviceHeader.toLowerCase()] : undefined;
    subject.device = cookie || (typeof hdr === "string" ? hdr : undefined) || undefined;
    let result: CheckResponse;
    try {
      const body = checkRequest(opts.action, subject);
      if (opts.challengePassed && (await opts.challengePassed(req))) body.challenge_passed = true;
      result = await opts.client.check(body, { failurePolicy: policy });
    } catch (err) {
      // An identifier Guard refused came from the end client, and so did one
      // that made the check's body pass Guard's 8 KiB (413 too_large).
      if (err instanceof GuardError && (err.status === 413 || (err.status === 400 && ["user", "ip", "device", "phone"].includes(err.field)))) {
        writeJSON(res, 400, "invalid_request", "the request is not valid");
        return;
      }
      next(err);
      return;
    }
    if (result.decision === "challenge") {
      (opts.onChallenge ?? ((_q, s, r) => writeChallenge(s, r)))(req, res, result);
      return;
    }
    if (result.decision !== "allow") {
      (opts.onDeny ?? ((_q, s, r) => writeDenial(s, r)))(req, res, result);
      return;
    }
    req.guard = new Attempt(opts.action, subject, result, opts.client);
    next();
  };
}

function cookieValue(header: string | undefined, name: string): string {
  for (const part of (header ?? "").split(";")) {
    const i = part.indexOf("=");
    if (i > 0 && part.slice(0, i).trim() === name) {
      const v = part.slice(i + 1).trim();
      try {
        return decodeURIComponent(v);
      } catch {
        return v;
      }
    }
  }
  return "";
}

/**
 * Answers a denied attempt: 429 (503 when a "closed" policy denied because
 * Guard could not answer), Retry-After in whole seconds rounded up when
 * the wait is known, Guard's RateLimit headers, and
 * {"error": {"code": "too_many_attempts", "message": denialMessage(result)}}.
 */
export function writeDenial(res: ServerResponse, result: CheckResponse): void {
  if (result.rateLimit) res.setHeader("RateLimit", result.rateLimit);
  if (result.rateLimitPolicy) res.setHeader("RateLimit-Policy", result.rateLimitPolicy);
  const secs = Math.ceil(result.retry_after_ms / 1000);
  if (secs > 0) res.setHeader("Retry-After", String(secs));
  writeJSON(res, result.bypassed ? 503 : 429, "too_many_attempts", denialMessage(result));
}

/** What writeChallenge tells the person; it names no rule, limit or account. */
export const challengeMessage = "Please confirm you are not a robot and try again.";

/**
 * Answers an attempt Guard wants challenged: 429 with Guard's RateLimit
 * headers, no Retry-After (passing the challenge, not waiting, is the way
 * on), and {"error": {"code": "challenge_required", "message": challengeMessage}}.
 * The client shows its challenge and sends the request again with the proof.
 */
export function writeChallenge(res: ServerResponse, result: CheckResponse): void {
  if (result.rateLimit) res.setHeader("RateLimit", result.rateLimit);
  if (result.rateLimitPolicy) res.setHeader("RateLimit-Policy", result.rateLimitPolicy);
  writeJSON(res, 429, "challenge_required", challengeMessage);
}

/**
 * The text to show the person: the same for rate limits, lockouts and deny
 * lists, and for accounts that exist or not, with the wait when known.
 */
export function denialMessage(result: CheckResponse): string {
  if (result.bypassed) return "The service is busy. Try again shortly.";
  const secs = Math.ceil(result.retry_after_ms / 1000);
  if (secs <= 0) return "Too many attempts. Try again later.";
  const unit = (n: number, one: string, many: string) => (n === 1 ? `1 ${one}` : `${n} ${many}`);
  const wait = secs < 60 ? unit(secs, "second", "seconds")
    : secs <= 3600 ? unit(Math.ceil(secs / 60), "minute", "minutes")
    : unit(Math.ceil(secs / 3600), "hour", "hours");
  return `Too many attempts. Try again in ${wait}.`;
}

function writeJSON(res: ServerResponse, status: number, code: string, message: string): void {
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Cache-Control", "no-store");
  res.end(JSON.stringify({ error: { code, message } }) + "\n");
}
