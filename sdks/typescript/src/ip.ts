import { BlockList, isIP } from "node:net";

/** The parts of a request an IPExtractor reads (Node's IncomingMessage and Express's Request have them). */
export interface RequestLike {
  headers: Record<string, string | string[] | undefined>;
  socket?: { remoteAddress?: string | undefined } | null;
}

/**
 * Finds the client address of a request that may have come through
 * reverse proxies. X-Forwarded-For and X-Real-IP are believed only when
 * the peer is a trusted proxy; then the client is the rightmost
 * X-Forwarded-For entry that is not a trusted proxy (entries with a port
 * count as their address; "unknown", empty and malformed entries are
 * skipped), else X-Real-IP (its last value when repeated), else the peer.
 * With no proxies it answers the peer. Guard's forward-auth and the Go SDK
 * follow the same rule.
 */
export class IPExtractor {
  private readonly trusted = new BlockList();
  private readonly any: boolean;

  /** proxies: addresses or CIDR prefixes ("10.0.0.0/8", "::1"); none trusted unless listed, loopback included. */
  constructor(proxies: string[] = []) {
    for (const p of proxies) {
      const [addr, bits, extra] = p.trim().split("/");
      const a = parseHop(addr ?? "");
      if (!a || extra !== undefined || (bits !== undefined && !/^\d+$/.test(bits))) {
        throw new Error(`guard: trusted proxy ${JSON.stringify(p)} is not an IP address or CIDR prefix`);
      }
      const family = isIP(a) === 6 ? "ipv6" : "ipv4";
      let prefix = bits === undefined ? (family === "ipv6" ? 128 : 32) : Number(bits);
      if (family === "ipv4" && addr !== a && prefix > 32) prefix -= 96; // ::ffff:a.b.c.d/120
      if (prefix > (family === "ipv6" ? 128 : 32)) {
        throw new Error(`guard: trusted proxy ${JSON.stringify(p)} has a prefix longer than the address`);
      }
      this.trusted.addSubnet(a, prefix, family);
    }
    this.any = proxies.length > 0;
  }

  private isTrusted(a: string): boolean {
    return this.any && this.trusted.check(a, isIP(a) === 6 ? "ipv6" : "ipv4");
  }

  /** The client address in canonical text, or "" when even the peer is unknown. */
  clientIP(req: RequestLike): string {
    const peer = parseHop(req.socket?.remoteAddress ?? "");
    if (!peer) return "";
    if (!this.isTrusted(peer)) return peer;
    const xff = header(req, "x-forwarded-for");
    if (xff.length > 0) {
      let leftmost = "";
      const hops = xff.join(",").split(",");
      for (let i = hops.length - 1; i >= 0; i--) {
        const a = parseHop(hops[i] ?? "");
        if (!a) continue;
        if (!this.isTrusted(a)) return a;
        leftmost = a;
      }
      if (leftmost) return leftmost;
    }
    // Repeated, the last X-Real-IP is the one the nearest proxy added.
    const real = parseHop(header(req, "x-real-ip").at(-1) ?? "");
    return real || peer;
  }
}

function header(req: RequestLike, name: string): string[] {
  const v = req.headers[name];
  if (v === undefined) return [];
  return Array.isArray(v) ? v : [v];
}

/** A decimal port, 0 to 65535, as Guard's forward-auth reads one. */
function isPort(p: string): boolean {
  return /^\d+$/.test(p) && Number(p) <= 65535;
}

/** Reads an address as proxies write it (bare, with a port, bracketed); IPv4-mapped IPv6 as IPv4; "" when it is none. */
export function parseHop(s: string): string {
  s = s.trim();
  if (s === "" || s.toLowerCase() === "unknown") return "";
  let host = s;
  if (s.startsWith("[")) {
    const end = s.indexOf("]");
    if (end < 0) return "";
    const rest = s.slice(end + 1);
    if (rest !== "" && !(rest.startsWith(":") && isPort(rest.slice(1)))) return "";
    host = s.slice(1, end);
  } else if (s.indexOf(":") !== -1 && s.indexOf(":") === s.lastIndexOf(":")) {
    const [h, port] = s.split(":");
    if (!isPort(port ?? "")) return "";
    host = h ?? "";
  }
  host = host.split("%")[0] ?? ""; // zones
  const v = isIP(host);
  if (v === 4) return host;
  if (v !== 6) return "";
  const g = ipv6Groups(host);
  // IPv4-mapped (::ffff:a.b.c.d, in any of its spellings) is IPv4.
  if (g.slice(0, 5).every((n) => n === 0) && g[5] === 0xffff) {
    return [g[6]! >> 8, g[6]! & 0xff, g[7]! >> 8, g[7]! & 0xff].join(".");
  }
  return canonicalIPv6(g);
}

/** The eight 16-bit groups of an IPv6 address that isIP accepted (a dotted IPv4 tail is the last two). */
function ipv6Groups(a: string): number[] {
  const parse = (s: string) => (s === "" ? [] : s.split(":"));
  const [head, tail] = a.includes("::") ? a.split("::") : [a, undefined];
  const h = parse(head ?? "");
  const t = tail === undefined ? [] : parse(tail);
  const last = tail === undefined ? h : t;
  if (last.length > 0 && last[last.length - 1]!.includes(".")) {
    const [p, q, r, s] = last.pop()!.split(".").map(Number);
    last.push(((p! << 8) | q!).toString(16), ((r! << 8) | s!).toString(16));
  }
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill("0"), ...t];
  return groups.map((x) => parseInt(x, 16));
}

/** RFC 5952 text of an IPv6 address given as its eight groups. */
function canonicalIPv6(nums: number[]): string {
  // Longest run of zeros (length >= 2) becomes "::".
  let best = -1, bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (nums[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && nums[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) { best = i; bestLen = j - i; }
    i = j;
  }
  const hex = nums.map((n) => n.toString(16));
  if (best < 0) return hex.join(":");
  return hex.slice(0, best).join(":") + "::" + hex.slice(best + bestLen).join(":");
}
