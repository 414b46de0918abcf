import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { GuardClient, IPExtractor, denialMessage, guardMiddleware, parseHop } from "../dist/index.js";
import { keys, startGuard, testTimeoutMs } from "./guard.mjs";

let guard;
const closers = [];
before(async () => { guard = await startGuard(); });
after(async () => { await Promise.all(closers.splice(0).map((c) => c())); await guard?.stop(); });

// app serves a login handler behind the middleware, Express-style: the
// form body is parsed first (as express.urlencoded would), then
// middleware, then the handler.
async function app(mw, seen = []) {
  const srv = createServer(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    req.body = Object.fromEntries(new URLSearchParams(body));
    await mw(req, res, (err) => {
      if (err) { res.statusCode = 500; res.end("error"); return; }
      seen.push(req.guard);
      req.guard.report(req.body.ok === "1" ? "success" : "failure");
      res.statusCode = 204;
      res.end();
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  let closed = false;
  const close = () => closed ? Promise.resolve() : (closed = true, new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  closers.push(close);
  return { url: `http://127.0.0.1:${srv.address().port}`, seen, close };
}

const post = (url, form, headers = {}) => fetch(url, {
  method: "POST", body: new URLSearchParams(form), headers,
});

test("middleware against a real Guard", async () => {
  const client = new GuardClient({ baseUrl: guard.url, apiKey: keys.check, timeoutMs: testTimeoutMs });
  const a = await app(guardMiddleware({
    client, action: "login", ip: new IPExtractor(["127.0.0.1"]), deviceCookie: "dev",
    user: (req) => req.body.email,
  }));
  let r = await post(a.url, { email: "Tina@Example.com" }, { "X-Forwarded-For": "198.51.100.70", Cookie: "x=1; dev=d-cookie" });
  assert.equal(r.status, 204);
  assert.deepEqual(a.seen[0].subject, { user: "Tina@Example.com", ip: "198.51.100.70", device: "d-cookie" });
  assert.ok(a.seen[0].result.decision_id);
  for (let i = 0; i < 9; i++) {
    await client.flush();
    await post(a.url, { email: "tina@example.com" }, { "X-Forwarded-For": "198.51.100.70" });
  }
  await client.flush();
  r = await post(a.url, { email: "tina@example.com" }, { "X-Forwarded-For": "198.51.100.70" });
  assert.equal(r.status, 429);
  assert.equal(r.headers.get("retry-after"), "60");
  assert.ok(r.headers.get("ratelimit"));
  assert.ok(r.headers.get("ratelimit-policy"));
  assert.deepEqual(await r.json(), { error: { code: "too_many_attempts", message: "Too many attempts. Try again in 1 minute." } });
  assert.equal(a.seen.length, 10, "the handler did not run for the denied attempt");
  r = await post(a.url, { email: "tina@example.com", ok: "1" }, { "X-Forwarded-For": "198.51.100.71" });
  assert.equal(r.status, 204, "another address is not locked");
  r = await post(a.url, { email: "x".repeat(300) });
  assert.equal(r.status, 400, "an identifier Guard refuses is the end client's 400");
  r = await post(a.url, { email: "x".repeat(9000) });
  assert.equal(r.status, 400, "so is one that makes the check's body pass Guard's 8 KiB (413)");
  await client.flush();
  await a.close();

  const wrong = await app(guardMiddleware({ client: new GuardClient({ baseUrl: guard.url, apiKey: "wrong" }), action: "login" }));
  assert.equal((await post(wrong.url, {})).status, 500, "a wrong key goes to next(err)");
  await wrong.close();
});

test("middleware failure policies", async () => {
  const hang = createServer(() => {});
  await new Promise((r) => hang.listen(0, "127.0.0.1", r));
  closers.push(() => new Promise((r) => { hang.closeAllConnections(); hang.close(() => r()); }));
  const client = new GuardClient({ baseUrl: `http://127.0.0.1:${hang.address().port}`, apiKey: "k", timeoutMs: 20 });
  const open = await app(guardMiddleware({ client, action: "login" }));
  assert.equal((await post(open.url, {})).status, 204);
  assert.equal(open.seen[0].result.bypassed, true);
  const closed = await app(guardMiddleware({ client, action: "login", failurePolicy: "closed" }));
  const r = await post(closed.url, {});
  assert.equal(r.status, 503);
  assert.equal(r.headers.get("retry-after"), null);
  await Promise.all([open.close(), closed.close()]);
});

test("IPExtractor", () => {
  const x = new IPExtractor(["10.0.0.0/8", "::1"]);
  const req = (peer, xff, real) => ({ socket: { remoteAddress: peer }, headers: { "x-forwarded-for": xff, "x-real-ip": real } });
  const cases = [
    ["203.0.113.9", "198.51.100.1", undefined, "203.0.113.9"],
    ["10.0.0.1", undefined, undefined, "10.0.0.1"],
    ["10.0.0.1", "1.1.1.1, 198.51.100.1, 10.0.0.2", undefined, "198.51.100.1"],
    ["10.0.0.1", ["1.1.1.1", "198.51.100.1"], undefined, "198.51.100.1"],
    ["10.0.0.1", "203.0.113.5:1234", undefined, "203.0.113.5"],
    ["10.0.0.1", "203.0.113.5:000080", undefined, "203.0.113.5"], // leading zeros, as Guard reads a port
    ["10.0.0.1", "[2001:db8::5]:443", undefined, "2001:db8::5"],
    ["10.0.0.1", "198.51.100.7, unknown, , 10.0.0.3", undefined, "198.51.100.7"],
    ["10.0.0.1", "198.51.100.7, 203.0.113.5:abc, [2001:db8::5]:, 203.0.113.6:99999", undefined, "198.51.100.7"],
    ["10.0.0.1", "unknown", "198.51.100.8", "198.51.100.8"],
    ["10.0.0.1", undefined, ["203.0.113.66", "198.51.100.8"], "198.51.100.8"], // repeated: the proxy's, last
    ["10.0.0.1", "10.0.0.9, 10.0.0.2", undefined, "10.0.0.9"],
    ["::1", "198.51.100.3", undefined, "198.51.100.3"],
    ["::ffff:10.0.0.1", "::ffff:198.51.100.5", undefined, "198.51.100.5"],
    ["10.0.0.1", "2001:DB8:0:0:0:0:0:1", undefined, "2001:db8::1"],
    // IPv4-mapped in hex, or written out without "::", is IPv4 (as Go's
    // netip and Python's ipaddress read it); a dotted tail elsewhere is two groups.
    ["10.0.0.1", "::ffff:c633:6405", undefined, "198.51.100.5"],
    ["10.0.0.1", "0:0:0:0:0:ffff:198.51.100.5", undefined, "198.51.100.5"],
    ["10.0.0.1", "2001:db8:1:2:3:4:198.51.100.5", undefined, "2001:db8:1:2:3:4:c633:6405"],
    ["10.0.0.1", "::198.51.100.5", undefined, "::c633:6405"],
    ["::ffff:a00:1", "198.51.100.9", undefined, "198.51.100.9"], // the peer is 10.0.0.1, trusted
  ];
  for (const [peer, xff, real, want] of cases) assert.equal(x.clientIP(req(peer, xff, real)), want, `${peer} ${xff}`);
  assert.equal(new IPExtractor().clientIP(req("10.0.0.1", "198.51.100.1")), "10.0.0.1");
  assert.throws(() => new IPExtractor(["10.0.0.0/33"]));
  assert.throws(() => new IPExtractor(["nope"]));
  assert.equal(parseHop("1:2:3"), "");
});

test("denialMessage", () => {
  const m = (ms) => denialMessage({ retry_after_ms: ms, bypassed: false });
  assert.equal(m(0), "Too many attempts. Try again later.");
  assert.equal(m(41250), "Too many attempts. Try again in 42 seconds.");
  assert.equal(m(60000), "Too many attempts. Try again in 1 minute.");
  assert.equal(m(3600001), "Too many attempts. Try again in 2 hours.");
});
