// Phone numbers (contract v1.1) against a real Guard on the built-in policy.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { GuardClient, GuardError, checkRequest } from "../dist/index.js";
import { eventually, keys, startGuard, testTimeoutMs } from "./guard.mjs";

let guard;
before(async () => { guard = await startGuard("phone: {default_region: GB}\nlists:\n  deny: {countries: [RU]}\n"); });
after(async () => { await guard?.stop(); });

test("otp_send limits a phone number and audits it", async () => {
  const checker = new GuardClient({ baseUrl: guard.url, apiKey: keys.check, timeoutMs: testTimeoutMs });
  const auditor = new GuardClient({ baseUrl: guard.url, apiKey: keys.audit, timeoutMs: testTimeoutMs });
  const first = await checker.check(checkRequest("otp_send", { phone: "+44 7400 123456" }));
  assert.equal(first.decision, "allow");
  assert.deepEqual(first.limits.map((l) => l.dimension).sort(), ["phone", "phone_country", "phone_prefix"]);
  for (let i = 0; i < 4; i++) await checker.check(checkRequest("otp_send", { phone: "07400 123456" }));
  const sixth = await checker.check(checkRequest("otp_send", { phone: "+447400123456" }));
  assert.equal(sixth.decision, "deny");
  assert.equal(sixth.limits[0].rule, "otp_send/phone");

  const ru = await checker.check({ action: "otp_send", phone: "+7 912 345-67-89" });
  assert.equal(ru.reason, "denylisted");

  await assert.rejects(checker.check({ action: "otp_send", phone: "+1 999 555 0123" }),
    (e) => e instanceof GuardError && e.status === 400 && e.field === "phone");

  assert.ok(await eventually(async () => (await auditor.audit({ phone: "+447400123456" })).events.length === 6), "six events");
  const page = await auditor.audit({ phone: "07400123456", decision: "deny" });
  assert.equal(page.events.length, 1);
  assert.equal(page.events[0].phone, "+447400123456");
});
