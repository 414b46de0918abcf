// Manual lockouts and paged lockout listings (contract v1.1) against a real
// Guard of their own, so that e2e.test.mjs counts only its own admin events.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { GuardClient, GuardError } from "../dist/index.js";
import { keys, startGuard, testTimeoutMs } from "./guard.mjs";

let guard;
before(async () => { guard = await startGuard(); });
after(async () => { await guard?.stop(); });

const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

test("manual lockouts", async () => {
  const admin = new GuardClient({ baseUrl: guard.url, apiKey: keys.admin, timeoutMs: testTimeoutMs });
  const checker = new GuardClient({ baseUrl: guard.url, apiKey: keys.check, timeoutMs: testTimeoutMs });
  const ip = "192.0.2.201";
  const locked = await admin.lock({ dimension: "ip", ip, duration_ms: 3_600_000, ledger: "auth", reason: "ts manual" });
  assert.deepEqual(locked.lockouts.map((e) => [e.dimension, e.ip, e.ledger, e.level]), [["ip", ip, "auth", 0]]);
  assert.match(locked.lockouts[0].until, TIME);
  assert.equal((await checker.check({ action: "login", ip })).reason, "locked_out");
  await assert.rejects(admin.lock({ dimension: "ip", ip, duration_ms: 1 }),
    (e) => e instanceof GuardError && e.status === 400 && e.field === "duration_ms");
  await assert.rejects(checker.lock({ dimension: "ip", ip, duration_ms: 60_000 }),
    (e) => e instanceof GuardError && e.status === 403 && e.code === "forbidden");
  await admin.unlock({ dimension: "ip", ip, reason: "ts manual done" });
  assert.equal((await checker.check({ action: "login", ip })).reason, "ok");
});

test("lockout listings are paged", async () => {
  const admin = new GuardClient({ baseUrl: guard.url, apiKey: keys.admin, timeoutMs: testTimeoutMs });
  const ips = ["192.0.2.211", "192.0.2.212", "192.0.2.213"];
  for (const ip of ips) await admin.lock({ dimension: "ip", ip, duration_ms: 3_600_000, ledger: "auth", reason: "ts paging" });
  const seen = [];
  let cursor, pages = 0;
  do {
    const page = await admin.lockouts({ dimension: "ip", ledger: "auth", limit: 2, cursor });
    assert.ok(page.lockouts.length <= 2, `page of ${page.lockouts.length}`);
    seen.push(...page.lockouts.map((e) => e.ip));
    pages++;
    cursor = page.next_cursor ?? undefined;
    assert.ok(page.next_cursor === null || typeof page.next_cursor === "string");
  } while (cursor !== undefined);
  assert.deepEqual(seen.filter((ip) => ips.includes(ip)).sort(), ips);
  assert.ok(pages >= 2, `${pages} pages`);
  await assert.rejects(admin.lockouts({ cursor: "forged" }), (e) => e instanceof GuardError && e.status === 400 && e.field === "cursor");
  for (const ip of ips) await admin.unlock({ dimension: "ip", ip, reason: "ts paging done" });
});
