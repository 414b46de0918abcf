import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { GuardClient, challengeMessage, guardMiddleware } from "../dist/index.js";
import { keys, startGuard, testTimeoutMs } from "./guard.mjs";

let guard;
const closers = [];
before(async () => { guard = await startGuard(); });
after(async () => { await Promise.all(closers.splice(0).map((c) => c())); await guard?.stop(); });

// The built-in policy challenges a device after 5 sign-ups an hour.
test("client: a challenge, then challenge_passed", async () => {
  const client = new GuardClient({ baseUrl: guard.url, apiKey: keys.check, timeoutMs: testTimeoutMs });
  const req = { action: "signup", device: "d-ts-1", ip: "198.51.100.90" };
  for (let i = 0; i < 5; i++) assert.equal((await client.check(req)).decision, "allow");
  const r = await client.check(req);
  assert.equal(r.decision, "challenge");
  assert.equal(r.reason, "challenge_required");
  assert.ok(r.retry_after_ms > 0);
  const passed = await client.check({ ...req, challenge_passed: true });
  assert.equal(passed.decision, "allow");
  assert.equal(passed.reason, "ok");
});

test("middleware: challenge answered, handler runs once the proof is verified", async () => {
  const client = new GuardClient({ baseUrl: guard.url, apiKey: keys.check, timeoutMs: testTimeoutMs });
  const mw = guardMiddleware({
    client, action: "signup", deviceHeader: "X-Device",
    challengePassed: (req) => req.headers["x-captcha"] === "verified",
  });
  let ran = 0;
  const srv = createServer(async (req, res) => {
    await mw(req, res, () => { ran++; res.statusCode = 204; res.end(); });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  closers.push(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  const url = `http://127.0.0.1:${srv.address().port}`;
  for (let i = 0; i < 5; i++) assert.equal((await fetch(url, { method: "POST", headers: { "X-Device": "d-ts-2" } })).status, 204);
  const r = await fetch(url, { method: "POST", headers: { "X-Device": "d-ts-2" } });
  assert.equal(r.status, 429);
  assert.equal(r.headers.get("retry-after"), null);
  assert.ok(r.headers.get("ratelimit"));
  assert.deepEqual(await r.json(), { error: { code: "challenge_required", message: challengeMessage } });
  assert.equal(ran, 5, "the handler did not run for the challenged attempt");
  const ok = await fetch(url, { method: "POST", headers: { "X-Device": "d-ts-2", "X-Captcha": "verified" } });
  assert.equal(ok.status, 204);
  assert.equal(ran, 6);
});
