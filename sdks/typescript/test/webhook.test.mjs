// verifyWebhook against signatures made here and against the ones a real
// Guard sends (a manual lockout notification to a local receiver).
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { SIGNATURE_HEADER, WebhookVerificationError, signWebhook, verifyWebhook } from "../dist/index.js";
import { keys, startGuard } from "./guard.mjs";

const secret = "whsec-test";
const body = '{"id":"01JD","event":"lockout"}';
const t0 = 1764586800;
const good = signWebhook(secret, t0, body);
const now = t0 * 1000;

test("signWebhook has the contract's shape", () => {
  assert.match(good, /^t=1764586800,v1=[0-9a-f]{64}$/);
});

const cases = [
  ["valid", secret, good, body, now + 60_000, undefined, null],
  ["rotation", secret, `${signWebhook("old", t0, body)},v1=${good.split("v1=")[1]}`, body, now, undefined, null],
  ["bytes body", secret, good, new TextEncoder().encode(body), now, undefined, null],
  ["wrong secret", "nope", good, body, now, undefined, "signature_mismatch"],
  ["body changed", secret, good, body.replace("lockout", "unlock"), now, undefined, "signature_mismatch"],
  ["replayed later", secret, good, body, now + 6 * 60_000, undefined, "signature_expired"],
  ["own tolerance", secret, good, body, now + 31_000, 30_000, "signature_expired"],
  ["no header", secret, undefined, body, now, undefined, "signature_missing"],
  ["no v1", secret, "t=1764586800", body, now, undefined, "signature_missing"],
  ["t not a number", secret, "t=soon,v1=00", body, now, undefined, "signature_missing"],
];
for (const [name, key, header, b, at, toleranceMs, code] of cases) {
  test(`verifyWebhook: ${name}`, () => {
    const call = () => verifyWebhook(key, header, b, { now: at, toleranceMs });
    if (code === null) {
      call();
    } else {
      assert.throws(call, (e) => e instanceof WebhookVerificationError && e.code === code);
    }
  });
}

test("a real Guard's notification verifies", async (t) => {
  let resolveGot;
  const got = new Promise((r) => { resolveGot = r; });
  const srv = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      try {
        verifyWebhook("whsec-ts-e2e", req.headers[SIGNATURE_HEADER.toLowerCase()], raw);
        resolveGot({ ok: true, n: JSON.parse(raw.toString()) });
      } catch (e) {
        resolveGot({ ok: false, e });
      }
      res.writeHead(204).end();
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  const guard = await startGuard(
    `notifications: {webhook_url: "http://127.0.0.1:${srv.address().port}/hook", secret: whsec-ts-e2e}\n`);
  t.after(guard.stop);
  const res = await fetch(`${guard.url}/v1/lockouts`, {
    method: "POST",
    headers: { authorization: `Bearer ${keys.admin}`, "content-type": "application/json" },
    body: JSON.stringify({ dimension: "user", user: "Alice@Example.com", duration_ms: 60000, reason: "ts test", ledger: "auth" }),
  });
  assert.equal(res.status, 201);
  const r = await got;
  assert.ok(r.ok, r.e?.message);
  assert.equal(r.n.event, "lockout");
  assert.equal(r.n.user, "alice@example.com");
  assert.equal(r.n.reason, "ts test");
  assert.equal(r.n.ip, null);
});
