// Lockout notifications (contract v1.1): the body Guard POSTs to
// notifications.webhook_url and the check of its X-Guard-Signature header,
// as the Go SDK's sdk/webhook.go defines them.
import { createHmac, timingSafeEqual } from "node:crypto";

/** The header that carries a notification's signature. */
export const SIGNATURE_HEADER = "X-Guard-Signature";

/** How far a signature's timestamp may lie from the receiver's clock by default. */
export const DEFAULT_WEBHOOK_TOLERANCE_MS = 5 * 60 * 1000;

/**
 * Body of a lockout notification. Identifiers are as the audit event beside
 * it has them (hashes under audit.pseudonymize), null when absent: for a
 * strike those of the striking request, for a manual lockout or an unlock
 * those of `dimension`, which says which key is locked. Deliveries are at
 * least once: deduplicate on `id`.
 */
export interface Notification {
  id: string;
  event: "lockout" | "unlock" | (string & {});
  /** RFC 3339 with milliseconds, UTC. */
  at: string;
  instance: string;
  /** null only for an unlock of every ledger when Guard could not tell which were locked. */
  ledger: string | null;
  dimension: string;
  user: string | null;
  ip: string | null;
  device: string | null;
  /** E.164 (or its hash), or the region / prefix of a phone_country / phone_prefix lockout. */
  phone?: string | null;
  level: number;
  /** null for an unlock. */
  until: string | null;
  /** The striking rule's name, or the administrator's reason. */
  reason: string;
}

/** Why verifyWebhook refused a request. */
export type WebhookErrorCode = "signature_missing" | "signature_mismatch" | "signature_expired";

export class WebhookVerificationError extends Error {
  readonly code: WebhookErrorCode;
  constructor(code: WebhookErrorCode, message: string) {
    super(message);
    this.name = "WebhookVerificationError";
    this.code = code;
  }
}

export interface VerifyOptions {
  /** The receiver's clock; default Date.now(). */
  now?: Date | number;
  /** Largest accepted distance between the signature's timestamp and now; default 5 minutes. */
  toleranceMs?: number;
}

type Bytes = string | Uint8Array;

function mac(secret: Bytes, t: string, body: Bytes): Buffer {
  return createHmac("sha256", secret).update(t).update(".").update(body).digest();
}

/** The X-Guard-Signature value for body signed with secret at unixSeconds (for receivers' tests). */
export function signWebhook(secret: Bytes, unixSeconds: number, body: Bytes): string {
  const t = String(Math.floor(unixSeconds));
  return `t=${t},v1=${mac(secret, t, body).toString("hex")}`;
}

/**
 * Checks a notification's X-Guard-Signature header against the raw body
 * (verify before parsing it): the HMAC is compared in constant time and
 * the timestamp must lie within the tolerance of now, so a captured
 * request cannot be replayed later. Several v1= parts (a secret rotation)
 * pass when one matches. Throws WebhookVerificationError otherwise.
 */
export function verifyWebhook(secret: Bytes, header: string | null | undefined, body: Bytes, options: VerifyOptions = {}): void {
  let t = "";
  const sigs: Buffer[] = [];
  for (const part of (header ?? "").split(",")) {
    const i = part.indexOf("=");
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    if (k === "t") t = v;
    if (k === "v1" && /^([0-9a-fA-F]{2})+$/.test(v)) sigs.push(Buffer.from(v, "hex"));
  }
  if (!/^-?\d+$/.test(t) || sigs.length === 0) {
    throw new WebhookVerificationError("signature_missing", "guard webhook: signature header missing or malformed");
  }
  const want = mac(secret, t, body);
  let match = false;
  for (const s of sigs) {
    // Every candidate is compared, so the time taken does not tell which matched.
    const ok = s.length === want.length && timingSafeEqual(s, want);
    match = ok || match;
  }
  if (!match) throw new WebhookVerificationError("signature_mismatch", "guard webhook: signature does not match");
  const now = options.now instanceof Date ? options.now.getTime() : (options.now ?? Date.now());
  const tolerance = options.toleranceMs && options.toleranceMs > 0 ? options.toleranceMs : DEFAULT_WEBHOOK_TOLERANCE_MS;
  if (Math.abs(now - Number(t) * 1000) > tolerance) {
    throw new WebhookVerificationError("signature_expired", "guard webhook: signature timestamp outside tolerance");
  }
}
