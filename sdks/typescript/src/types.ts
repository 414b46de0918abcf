// Wire types of the Guard HTTP API (contract v1), as the Go SDK's
// sdk/wire.go defines them. Times are RFC 3339 strings with milliseconds
// (UTC); durations are integer milliseconds in fields ending in _ms.

/** "allow", "deny", or (contract v1.1) "challenge"; treat anything but "allow" as "not now". */
export type Decision = "allow" | "deny" | "challenge" | (string & {});

export type Outcome = "success" | "failure";

export type Dimension =
  | "user"
  | "ip"
  | "device"
  | "user+ip"
  | "user+device"
  | "phone"
  | "phone_country"
  | "phone_prefix"
  | (string & {});

/** Body of POST /v1/check. Absent identifiers are not evaluated; at least one is required. */
export interface CheckRequest {
  action: string;
  user?: string;
  ip?: string;
  device?: string;
  /** Phone number: E.164 ("+447400123456"), or national in Guard's phone.default_region (contract v1.1). */
  phone?: string;
  /** Counts the attempt as that many; default 1. */
  cost?: number;
  /** Evaluate and audit without recording. */
  dry_run?: boolean;
  /**
   * The person passed the challenge an earlier answer asked for (decision
   * "challenge"): challenge rules then allow; deny rules, lockouts and
   * lists apply as always.
   */
  challenge_passed?: boolean;
}

export interface Limit {
  rule: string;
  dimension: Dimension;
  limit: number;
  window_ms: number;
  remaining: number;
  reset_ms: number;
  /** "log", "counter" or "bucket" (contract v1.1). */
  algorithm: "log" | "counter" | "bucket";
  /** For a distinct-count rule: the field it counts; remaining counts distinct values. */
  distinct?: "user" | "device";
}

export interface Lockout {
  dimension: Dimension;
  /** RFC 3339 with milliseconds, UTC. */
  until: string;
  level: number;
}

/** Answer of POST /v1/check, plus what the client adds (not on the wire). */
export interface CheckResponse {
  decision: Decision;
  /** ok, rate_limited, locked_out, denylisted, allowlisted, shadow, store_unavailable, challenge_required; guard_unavailable when bypassed. */
  reason: string;
  retry_after_ms: number;
  decision_id: string;
  degraded: boolean;
  limits: Limit[];
  lockout: Lockout | null;
  /** The RateLimit header Guard sent ("" for none), for relaying. */
  rateLimit: string;
  /** The RateLimit-Policy header Guard sent ("" for none). */
  rateLimitPolicy: string;
  /** Set when Guard could not answer and the failure policy decided. */
  bypassed: boolean;
  /** Why Guard was bypassed. */
  cause?: unknown;
}

export interface ReportRequest {
  action: string;
  user?: string;
  ip?: string;
  device?: string;
  phone?: string;
  outcome: Outcome;
  /** decision_id of the check this report closes. */
  decision_id?: string;
}

export interface ReportResponse {
  lockout: Lockout | null;
}

export interface LockoutFilter {
  user?: string;
  ip?: string;
  device?: string;
  phone?: string;
  dimension?: Dimension;
  ledger?: string;
  /** Page size, 1..1000; default 100 (contract v1.1). */
  limit?: number;
  /** A previous page's next_cursor. */
  cursor?: string;
}

export interface LockoutEntry {
  ledger: string;
  dimension: Dimension;
  user?: string;
  ip?: string;
  device?: string;
  /** E.164, on phone lockouts. */
  phone?: string;
  /** ISO 3166 region, on phone_country lockouts. */
  phone_country?: string;
  /** "+" and the first digits, on phone_prefix lockouts. */
  phone_prefix?: string;
  level: number;
  since: string;
  until: string;
}

/** One page of GET /v1/lockouts. */
export interface LockoutsResponse {
  lockouts: LockoutEntry[];
  /** The cursor of the next page; null when the listing is complete. */
  next_cursor: string | null;
}

export interface UnlockRequest {
  dimension: Dimension;
  user?: string;
  ip?: string;
  device?: string;
  /** For phone_country and phone_prefix: any number in that country or prefix, or */
  phone?: string;
  /** the key's value as listed: "GB" for phone_country, */
  phone_country?: string;
  /** "+447400" for phone_prefix. */
  phone_prefix?: string;
  ledger?: string;
  reason?: string;
}

/** Body of POST /v1/lockouts (contract v1.1): a manual lockout of the key that dimension and its identifiers name. */
export interface LockRequest {
  dimension: Dimension;
  user?: string;
  ip?: string;
  device?: string;
  /** As in UnlockRequest: a number, or the key's value as listed (phone_country, phone_prefix). */
  phone?: string;
  phone_country?: string;
  phone_prefix?: string;
  /** How long the key stays locked, 1 s to 30 days, in ms. */
  duration_ms: number;
  /** One ledger; default every ledger of an action that has a lockout ladder. */
  ledger?: string;
  /** Recorded in the audit trail as the admin event's note. */
  reason?: string;
}

/** Answer of POST /v1/lockouts: one entry per ledger locked (level 0 for a key without strikes), no cursor. */
export interface LockResponse {
  lockouts: LockoutEntry[];
}

export interface PolicyRule {
  name: string;
  dimension: Dimension;
  limit: number;
  window_ms: number;
  shadow: boolean;
  /** "user" or "device" for a distinct-count rule. */
  distinct?: "user" | "device";
  algorithm: "log" | "counter" | "bucket";
  /** "deny" or "challenge" on attempt rules (contract v1.1); absent on failure rules. */
  on_limit?: "deny" | "challenge";
}

export interface PolicyAction {
  limits: PolicyRule[];
  failures: PolicyRule[];
  lockout: { ladder_ms: number[]; decay_ms: number; ledger: string; count_denials: boolean };
  on_store_failure: string;
  shadow: boolean;
  /** Every allowed check holds one provisional failure until its report settles it (contract v1.1). */
  reserve_failures: boolean;
}

export interface PolicyList {
  cidrs: string[];
  users: string[];
  devices: string[];
  /** ISO 3166 regions, matched on phone_country. */
  countries: string[];
}

export interface Policy {
  actions: Record<string, PolicyAction>;
  lists: { allow: PolicyList; deny: PolicyList };
}

export interface AuditEvent {
  id: string;
  at: string;
  kind: "check" | "report" | "admin" | (string & {});
  action: string | null;
  decision: string | null;
  reason: string | null;
  outcome: string | null;
  user: string | null;
  ip: string | null;
  device: string | null;
  phone: string | null;
  rule: string | null;
  retry_after_ms: number | null;
  lockout_until: string | null;
  degraded: boolean | null;
  dry_run: boolean | null;
  api_key: string | null;
  decision_id: string | null;
  instance: string | null;
  note: string | null;
}

export interface AuditPage {
  events: AuditEvent[];
  next_cursor: string | null;
}

export interface AuditFilter {
  user?: string;
  /** Address or CIDR. */
  ip?: string;
  device?: string;
  /** Normalised by Guard like a request's. */
  phone?: string;
  action?: string;
  decision?: string;
  reason?: string;
  kind?: string;
  /** Inclusive. */
  since?: Date | string;
  /** Exclusive. */
  until?: Date | string;
  /** 1..1000; default 100. */
  limit?: number;
  cursor?: string;
}

export interface Readiness {
  mode: "normal" | "degraded" | (string & {});
  redis: string;
  postgres: string;
  audit_backlog: number;
}
