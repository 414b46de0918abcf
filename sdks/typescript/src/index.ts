// Guard's TypeScript SDK: a client of the Guard HTTP API, an IP extractor
// that knows about trusted proxies, and an Express-style middleware. Zero
// runtime dependencies; Node >= 20.
export * from "./types.js";
export * from "./client.js";
export * from "./ip.js";
export * from "./middleware.js";
export * from "./webhook.js";
