// Loaded into the conformance suite's Node process (node --require THIS): adds
// "Authorization: Bearer $RINGFENCE_CONFORMANCE_TOKEN" to every request whose origin is
// $RINGFENCE_CONFORMANCE_ORIGIN (the `ringfence serve` under test, loopback only). The suite
// cannot send a bearer token; ringfence serve is run unchanged, with its real token check,
// Host and Origin checks. Both the global fetch (the suite's SDK client and raw POSTs) and
// npm undici's request() (the DNS-rebinding scenario) send through undici's global
// dispatcher, which is shared process-wide by Symbol.for("undici.globalDispatcher.1").
"use strict";
// The suite's own undici (resolved from its entry point, process.argv[1]).
const suiteRequire = require("node:module").createRequire(process.argv[1]);
const { getGlobalDispatcher, setGlobalDispatcher, Dispatcher } = suiteRequire("undici");

const token = process.env.RINGFENCE_CONFORMANCE_TOKEN;
const origin = process.env.RINGFENCE_CONFORMANCE_ORIGIN;
const loopback = /^http:\/\/(127\.0\.0\.1|localhost|\[::1\]):\d+$/;
if (!token || !origin || !loopback.test(origin)) {
  throw new Error("RINGFENCE_CONFORMANCE_TOKEN and a loopback RINGFENCE_CONFORMANCE_ORIGIN are required");
}

function withToken(headers) {
  const value = `Bearer ${token}`;
  if (headers == null) return { authorization: value };
  if (Array.isArray(headers)) return [...headers, "authorization", value];
  if (typeof headers[Symbol.iterator] === "function" && typeof headers !== "string") {
    return [...Array.from(headers).flat(), "authorization", value];
  }
  return { ...headers, authorization: value };
}

class InjectToken extends Dispatcher {
  constructor(inner) {
    super();
    this.inner = inner;
  }
  dispatch(opts, handler) {
    const target = String(opts.origin ?? "").replace(/\/$/, "");
    if (target === origin) opts = { ...opts, headers: withToken(opts.headers) };
    return this.inner.dispatch(opts, handler);
  }
  close(...args) { return this.inner.close(...args); }
  destroy(...args) { return this.inner.destroy(...args); }
}

setGlobalDispatcher(new InjectToken(getGlobalDispatcher()));
