// Timeouts, retries and failure policies against servers that hang,
// fail, answer slowly or drop connections (a broken network path, not a
// stand-in for Guard, which e2e.test.mjs runs for real).
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { createServer as createTCPServer } from "node:net";
import { after, test } from "node:test";
import { GuardClient, GuardError, GuardUnavailableError, TooManyPendingReportsError, isUnavailable, parseRetryAfter } from "../dist/index.js";

const answer = '{"decision":"allow","reason":"ok","retry_after_ms":0,"decision_id":"01J","degraded":false,"limits":[],"lockout":null}';
const login = { action: "login", user: "alice@example.com" };

// Every server is closed when the file's tests end, failed or not, so a
// failure cannot leave the process hanging.
const servers = new Set();
after(() => Promise.all([...servers].map((s) => s.close())));

async function serve(handler) {
  const calls = { n: 0 };
  const srv = createServer((req, res) => { calls.n++; handler(req, res, calls.n); });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const s = {
    url: `http://127.0.0.1:${srv.address().port}`, calls,
    close: () => {
      if (!servers.delete(s)) return Promise.resolve();
      return new Promise((r) => { srv.closeAllConnections(); srv.close(r); });
    },
  };
  servers.add(s);
  return s;
}

const hanging = () => serve(() => {});
const failing = (status, n) => serve((req, res, call) => {
  res.setHeader("Content-Type", "application/json");
  if (call <= n) {
    res.writeHead(status, { "Retry-After": "7", "X-Request-Id": "req-1" });
    res.end('{"error":{"code":"unavailable","message":"guard cannot answer right now"}}');
    return;
  }
  res.end(req.url.startsWith("/v1/check") ? answer : '{"actions":{},"lists":{}}');
});

async function closedPort() {
  const s = createTCPServer();
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  const port = s.address().port;
  await new Promise((r) => s.close(r));
  return `http://127.0.0.1:${port}`;
}

test("the default timeout stops a hanging Guard", async () => {
  const srv = await hanging();
  const start = Date.now();
  await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k" }).check(login), (e) => isUnavailable(e));
  assert.ok(Date.now() - start < 5000, "not the 10 s of a default client");
  await srv.close();
});

test("timeouts against a slow Guard", async () => {
  const srv = await serve((req, res) => setTimeout(() => res.end(answer), 150));
  assert.equal((await new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 5000 }).check(login)).decision, "allow");
  await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 20 }).check(login), (e) => isUnavailable(e));
  await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 5000 }).check(login, { signal: AbortSignal.timeout(20) }),
    (e) => isUnavailable(e));
  assert.equal((await new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 0 }).check(login)).decision, "allow");
  await srv.close();
});

test("retries", async (t) => {
  await t.test("GET retried after 5xx", async () => {
    const srv = await failing(503, 2);
    await new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 5000 }).policy();
    assert.equal(srv.calls.n, 3);
    await srv.close();
  });
  await t.test("GET gives up after the retries with the last error", async () => {
    const srv = await failing(502, 10);
    await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k", retries: 1 }).policy(),
      (e) => e instanceof GuardError && e.status === 502 && e.requestId === "req-1" && e.retryAfterMs === 7000);
    assert.equal(srv.calls.n, 2);
    await srv.close();
  });
  await t.test("GET not retried after 4xx", async () => {
    const srv = await failing(403, 10);
    await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 5000 }).policy());
    assert.equal(srv.calls.n, 1);
    await srv.close();
  });
  await t.test("check not retried after 5xx", async () => {
    const srv = await failing(503, 1);
    await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 5000 }).check(login), (e) => isUnavailable(e));
    assert.equal(srv.calls.n, 1);
    await srv.close();
  });
  await t.test("report not retried after a dropped connection", async () => {
    const srv = await serve((req) => req.socket.destroy());
    await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 5000 }).report({ ...login, outcome: "failure" }), (e) => isUnavailable(e));
    assert.equal(srv.calls.n, 1);
    await srv.close();
  });
  await t.test("GET retried after a dropped connection", async () => {
    const srv = await serve((req) => req.socket.destroy());
    await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k", timeoutMs: 5000 }).ready(), (e) => isUnavailable(e));
    assert.equal(srv.calls.n, 3);
    await srv.close();
  });
});

test("failure policies", async () => {
  const hang = await hanging();
  const fail = await failing(500, 1000);
  const bad = await serve((req, res) => { res.writeHead(400); res.end('{"error":{"code":"invalid_request","message":"bad","field":"ip"}}'); });
  const down = await closedPort();
  const cases = [
    [hang.url, "error", undefined, null],
    [hang.url, "open", undefined, "allow"],
    [hang.url, "closed", undefined, "deny"],
    [fail.url, "open", undefined, "allow"],
    [fail.url, "closed", undefined, "deny"],
    [down, "open", undefined, "allow"],
    [down, "open", "closed", "deny"],
    [fail.url, "error", "open", "allow"],
    [fail.url, "open", "error", null],
    [bad.url, "open", undefined, null],
  ];
  for (const [url, clientPolicy, callPolicy, want] of cases) {
    // Only the hanging server needs a short budget; the others must answer
    // within it even on a loaded machine.
    const c = new GuardClient({ baseUrl: url, apiKey: "k", timeoutMs: url === hang.url ? 30 : 5000, failurePolicy: clientPolicy });
    const p = c.check(login, callPolicy ? { failurePolicy: callPolicy } : {});
    if (want === null) {
      await assert.rejects(p, `${url} ${clientPolicy}/${callPolicy}`);
      continue;
    }
    const r = await p;
    assert.equal(r.decision, want, `${clientPolicy}/${callPolicy}`);
    assert.equal(r.bypassed, true);
    assert.equal(r.reason, "guard_unavailable");
    assert.ok(r.cause);
  }
  await Promise.all([hang.close(), fail.close(), bad.close()]);
});

test("a check the caller aborts is an error under every policy; its timeout signal is not", async () => {
  const hang = await hanging();
  const c = new GuardClient({ baseUrl: hang.url, apiKey: "k", timeoutMs: 5000, failurePolicy: "open" });
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 30);
  await assert.rejects(c.check(login, { signal: ac.signal }), "an aborted caller is not let through");
  const r = await c.check(login, { signal: AbortSignal.timeout(30) });
  assert.equal(r.bypassed, true);
  assert.equal(r.decision, "allow");
  await hang.close();
});

test("background reports", async () => {
  let got = 0;
  const srv = await serve((req, res) => setTimeout(() => { got++; res.end('{"lockout":null}'); }, 30));
  const errors = [];
  const c = new GuardClient({ baseUrl: srv.url, apiKey: "k", onAsyncError: (e) => errors.push(e), maxPendingReports: 1 });
  c.reportInBackground({ ...login, outcome: "success" });
  c.reportInBackground({ ...login, outcome: "success" }); // over the bound: dropped
  await c.flush();
  assert.equal(got, 1);
  assert.equal(errors.length, 1);
  assert.match(String(errors[0]), /too many reports pending/);
  assert.ok(errors[0] instanceof TooManyPendingReportsError, "a dropped report is told apart by its class, as Go's ErrTooManyPendingReports");
  await srv.close();
});

test("parseRetryAfter", () => {
  assert.equal(parseRetryAfter("42"), 42_000);
  assert.equal(parseRetryAfter(""), undefined);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(new Date(1_000_000 + 5000).toUTCString(), 1_000_000), 5000);
});

test("an export refuses another server's 200 answer", async () => {
  // A proxy's sign-in page (or any server at the URL) answers 200 too.
  const srv = await serve((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    res.end("<html>sign in</html>");
  });
  const c = new GuardClient({ baseUrl: srv.url, apiKey: "k" });
  await assert.rejects(c.exportAudit({}, "csv"), (err) =>
    err instanceof GuardError && err.status === 200 && err.code === "" &&
    err.message.includes('"text/html; charset=utf-8", not text/csv'));
  await srv.close();
});

test("a client that cannot send a valid request is a configuration error, not an outage", async () => {
  // fetch refuses such a header before sending anything; reported as
  // unavailable, "open" (the middleware's default) would let every attempt
  // through unchecked.
  for (const opts of [
    { baseUrl: "http://127.0.0.1:1", apiKey: "k-\nsecret" },
    { baseUrl: "http://127.0.0.1:1", apiKey: "k-\u0000secret" },
    { baseUrl: "http://127.0.0.1:1", apiKey: "k-€secret" }, // fetch: not a ByteString
    { baseUrl: "http://127.0.0.1:1", apiKey: "k", userAgent: "app\r\nX-Evil: 1" },
    { baseUrl: "ftp://127.0.0.1:1", apiKey: "k" },
  ]) {
    assert.throws(() => new GuardClient({ ...opts, failurePolicy: "open" }),
      (e) => !(e instanceof GuardError) && !isUnavailable(e) && !String(e).includes("secret"), JSON.stringify(opts));
  }
  // White space around the key (read from a file with its newline) is no part of it.
  let auth;
  const srv = await serve((req, res) => { auth = req.headers.authorization; res.end(answer); });
  const r = await new GuardClient({ baseUrl: srv.url, apiKey: " k-check\r\n", timeoutMs: 5000 }).check(login, { failurePolicy: "closed" });
  assert.equal(r.bypassed, false);
  assert.equal(auth, "Bearer k-check");
  await srv.close();
});

test("health: GET /healthz, retried like GETs; another server's 200 is no healthy Guard", async () => {
  const drop = await serve((req) => req.socket.destroy());
  await assert.rejects(new GuardClient({ baseUrl: drop.url, apiKey: "k" }).health(), (e) => isUnavailable(e));
  assert.equal(drop.calls.n, 3);
  await drop.close();
  const other = await serve((req, res) => res.end('{"healthy":true}'));
  await assert.rejects(new GuardClient({ baseUrl: other.url, apiKey: "k" }).health(),
    (e) => e instanceof GuardError && e.status === 200 && e.code === "" && /is the URL Guard's/.test(e.message));
  await other.close();
});

test("an export Guard cuts mid-way is a GuardUnavailableError, not fetch's bare TypeError", async () => {
  // Guard cuts an export whose store fails mid-way (a broken transfer, never a short file).
  const srv = await serve((req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.write('{"id":"01J"}\n', () => res.socket.destroy());
  });
  await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k" }).exportAudit({}, "ndjson"),
    (e) => e instanceof GuardUnavailableError && isUnavailable(e));
  await srv.close();
});

test("a 2xx check answer without a decision is Guard not answering, as a non-JSON one is", async () => {
  const srv = await serve((req, res) => { res.setHeader("Content-Type", "application/json"); res.end('{"status":"ok"}'); });
  await assert.rejects(new GuardClient({ baseUrl: srv.url, apiKey: "k" }).check(login), (e) => isUnavailable(e));
  const r = await new GuardClient({ baseUrl: srv.url, apiKey: "k", failurePolicy: "open" }).check(login);
  assert.equal(r.bypassed, true);
  assert.equal(r.decision, "allow");
  await srv.close();
});
