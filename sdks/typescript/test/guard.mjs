// Starts a real Guard for the tests: $GUARD_BIN, or a binary built from
// this repository's cmd/guard (go build), serving on a free loopback port
// with the in-memory limiter and audit store.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const keys = { check: "k-check", admin: "k-admin", audit: "k-audit" };

// The timeout of test clients of a real Guard: the SDK's default (300 ms) is
// a production budget, and a loaded CI machine can take longer for a call
// whose timing is not what the test is about.
export const testTimeoutMs = 5000;

let built;

function guardBinary() {
  if (process.env.GUARD_BIN) return process.env.GUARD_BIN;
  if (!built) {
    const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
    const dir = mkdtempSync(join(tmpdir(), "guard-ts-bin-"));
    built = join(dir, "guard");
    execFileSync("go", ["build", "-o", built, "./cmd/guard"], { cwd: root, stdio: "inherit" });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

/** Starts Guard; returns { url, stop }. */
export async function startGuard(extra = "") {
  const dir = mkdtempSync(join(tmpdir(), "guard-ts-"));
  const config = join(dir, "guard.yaml");
  writeFileSync(config, `listen: 127.0.0.1:0
key_secret: ts-test-secret-0123456789abcdef
api_keys:
  - {name: auth-service, scopes: [check], key: "${keys.check}"}
  - {name: ops, scopes: [admin], key: "${keys.admin}"}
  - {name: secteam, scopes: ["audit:read"], key: "${keys.audit}"}
audit: {flush_interval: 10ms}
${extra}`);
  const child = spawn(guardBinary(), ["serve", "--config", config, "--log-format", "json"], {
    cwd: dir, env: { PATH: process.env.PATH, HOME: dir }, stdio: ["ignore", "ignore", "pipe"],
  });
  const stop = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const log = [];
  const url = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error("guard did not start in 20s")), 20_000);
    const lines = createInterface({ input: child.stderr });
    lines.on("line", (line) => {
      try {
        const l = JSON.parse(line);
        if (l.msg === "guard listening") {
          clearTimeout(timer);
          resolveUrl(`http://${l.addr}`);
          return;
        }
      } catch { /* not JSON */ }
      log.push(line);
    });
    child.once("exit", (code) => { clearTimeout(timer); reject(new Error(`guard exited ${code}:\n${log.join("\n")}`)); });
  });
  return { url, stop };
}

/** Polls fn until it returns a truthy value (audit events land asynchronously). */
export async function eventually(fn, ms = 5000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 10));
  }
}
