// Drives every endpoint the SDK covers against a real Guard.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { GuardClient, GuardError, checkRequest, reportRequest } from "../dist/index.js";
import { eventually, keys, startGuard, testTimeoutMs } from "./guard.mjs";

let guard;
before(async () => { guard = await startGuard(); });
after(async () => { await guard?.stop(); });

test("every endpoint against a real Guard", async () => {
  const checker = new GuardClient({ baseUrl: guard.url, apiKey: keys.check, timeoutMs: testTimeoutMs });
  const admin = new GuardClient({ baseUrl: guard.url, apiKey: keys.admin, timeoutMs: testTimeoutMs });
  const auditor = new GuardClient({ baseUrl: guard.url, apiKey: keys.audit, timeoutMs: testTimeoutMs });

  const alice = { user: "Alice@Example.COM", ip: "203.0.113.7", device: "d-alice" };
  const res = await checker.check(checkRequest("login", alice));
  assert.equal(res.decision, "allow");
  assert.equal(res.reason, "ok");
  assert.equal(res.bypassed, false);
  assert.equal(res.limits.length, 2);
  assert.ok(res.decision_id);
  assert.match(res.rateLimit, /"login\/ip";r=59;t=60/);
  assert.match(res.rateLimitPolicy, /"login\/ip";q=60;w=60/);

  const dry = await checker.check({ action: "login", ip: "203.0.113.8", cost: 2, dry_run: true });
  assert.equal(dry.limits[0].remaining, 58);

  assert.deepEqual(await checker.report(reportRequest("login", alice, "success", res)), { lockout: null });
  const bob = { user: "bob@example.com", ip: "198.51.100.9" };
  let struck = null;
  for (let i = 0; i < 10; i++) struck = (await checker.report(reportRequest("login", bob, "failure"))).lockout;
  assert.equal(struck?.dimension, "user+ip");
  assert.equal(struck?.level, 1);
  assert.match(struck.until, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  const denied = await checker.check(checkRequest("login", bob));
  assert.equal(denied.decision, "deny");
  assert.equal(denied.reason, "locked_out");
  assert.ok(denied.retry_after_ms > 0 && denied.retry_after_ms <= 60_000);

  const ls = await admin.lockouts({ user: "BOB@example.com", dimension: "user+ip" });
  assert.equal(ls.lockouts.length, 1);
  assert.equal(ls.lockouts[0].ip, "198.51.100.9");
  assert.equal(ls.lockouts[0].until, struck.until);
  await assert.rejects(checker.lockouts(), (e) => e instanceof GuardError && e.status === 403 && e.code === "forbidden");

  const unlock = { dimension: "user+ip", user: "bob@example.com", ip: "198.51.100.9", reason: "ts e2e" };
  await admin.unlock(unlock);
  await assert.rejects(admin.unlock(unlock), (e) => e instanceof GuardError && e.status === 404 && e.code === "not_found");
  assert.equal((await checker.check(checkRequest("login", bob))).decision, "allow");

  const policy = await admin.policy();
  assert.equal(policy.actions.login.limits.length, 2);
  assert.equal(policy.actions.login.lockout.ledger, "auth");
  assert.equal(policy.actions.otp_verify.reserve_failures, true);
  assert.ok(policy.actions.signup.limits.some((r) => r.on_limit === "challenge"), "signup has a challenge rule");
  assert.ok(policy.actions.login.failures.every((r) => r.on_limit === undefined), "failure rules carry no on_limit");

  // The ten report events land asynchronously; page through them once all are stored.
  assert.ok(await eventually(async () => (await auditor.audit({ user: "bob@example.com", kind: "report" })).events.length === 10),
    "ten report events");
  const page = await auditor.audit({ user: "bob@example.com", kind: "report", limit: 4 });
  assert.equal(page.events[0].outcome, "failure");
  assert.equal(page.events[0].api_key, "auth-service");
  assert.ok(page.next_cursor);
  const next = await auditor.audit({ user: "bob@example.com", kind: "report", limit: 4, cursor: page.next_cursor });
  assert.equal(next.events.length, 4);
  assert.notEqual(next.events[0].id, page.events[0].id);
  await assert.rejects(auditor.audit({ cursor: "forged" }), (e) => e.status === 400 && e.field === "cursor");
  const since = new Date(Date.now() - 60_000);
  const nd = await auditor.exportAudit({ user: "bob@example.com", kind: "report", since }, "ndjson");
  const lines = nd.trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(lines.length, 10);
  assert.ok(lines.every((e) => e.kind === "report"));
  const csv = await eventually(async () => {
    const c = await auditor.exportAudit({ kind: "admin" }, "csv");
    return c.trim().split("\n").length === 2 ? c : null;
  });
  assert.ok(csv?.includes("ts e2e"), csv);

  const ready = await checker.ready();
  assert.equal(ready.mode, "normal");
  assert.equal(await new GuardClient({ baseUrl: guard.url, apiKey: "" }).health(), undefined, "healthz needs no key");
  await assert.rejects(checker.check({ action: "nope", user: "x" }), (e) => e.code === "unknown_action");
  await assert.rejects(checker.check({ action: "login", ip: "203.0.113.007" }), (e) => e.status === 400 && e.field === "ip");
  await assert.rejects(new GuardClient({ baseUrl: guard.url, apiKey: "wrong" }).policy(), (e) => e.status === 401);
});
