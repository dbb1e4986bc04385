// Set up in every invocation before the function (functions::runner): the `Basalt` data API,
// `Basalt.Error`, `fetch`, `setTimeout`/`clearTimeout`, all over the host's `__host(op, args)`,
// which answers with a promise (functions::host). docs/api.md "Cloud functions" documents it.
(function () {
  "use strict";
  const host = globalThis.__host;
  delete globalThis.__host;

  class BasaltError extends Error {
    constructor(code, message) {
      super(message);
      this.name = "BasaltError";
      this.code = code;
    }
  }
  // An error of the data API itself (a refused call, a bad argument), marked so that an
  // uncaught one fails a directly called function with 310 rather than its code.
  function hostError(code, message) {
    const e = new BasaltError(code === null ? undefined : code, message);
    Object.defineProperty(e, "__host", { value: true });
    return e;
  }
  // How the host turns a refused call into the error the function catches.
  Object.defineProperty(globalThis, "__error", { value: hostError });

  const enc = encodeURIComponent;
  function classPath(className) {
    if (typeof className !== "string" || className === "") {
      throw hostError(103, "a class name is a non-empty string");
    }
    switch (className) {
      case "_User": return "/1/users";
      case "_Role": return "/1/roles";
      case "_Installation": return "/1/installations";
      default: return "/1/classes/" + enc(className);
    }
  }
  function objectPath(className, id) {
    if (typeof id !== "string" || id === "") {
      throw hostError(101, "an objectId is a non-empty string");
    }
    return classPath(className) + "/" + enc(id);
  }
  function queryString(params) {
    const parts = [];
    for (const [k, v] of Object.entries(params || {})) {
      if (v === undefined || v === null) continue;
      let text;
      if (v === true) text = "1";
      else if (typeof v === "object") text = JSON.stringify(v);
      else text = String(v);
      parts.push(enc(k) + "=" + enc(text));
    }
    return parts.length ? "?" + parts.join("&") : "";
  }
  function call(method, path, body, opts) {
    return host("request", {
      method,
      path,
      body: body === undefined ? null : body,
      master: !!(opts && opts.useMasterKey),
    });
  }

  const Basalt = {
    Error: BasaltError,
    /** Any REST call: `Basalt.request("GET", "/1/classes/A?limit=1")`. */
    request: (method, path, body, opts) => call(method, path, body, opts),
    /** A listing or aggregation: `{where, order, limit, skip, keys, include, count, ...}`. */
    query: (className, params, opts) =>
      call("GET", classPath(className) + queryString(params), null, opts),
    find: async (className, params, opts) =>
      (await Basalt.query(className, params, opts)).results,
    first: async (className, params, opts) => {
      const rows = await Basalt.find(className, Object.assign({}, params, { limit: 1 }), opts);
      return rows.length ? rows[0] : null;
    },
    get: (className, id, opts) =>
      call("GET", objectPath(className, id) +
        queryString(opts && opts.include ? { include: opts.include } : {}), null, opts),
    create: (className, object, opts) => call("POST", classPath(className), object || {}, opts),
    update: (className, id, changes, opts) =>
      call("PUT", objectPath(className, id), changes || {}, opts),
    delete: (className, id, opts) => call("DELETE", objectPath(className, id), null, opts),
    count: async (className, where, opts) =>
      (await Basalt.query(className, { where: where || {}, count: 1, limit: 0 }, opts)).count,
    aggregate: (className, params, opts) => Basalt.query(className, params, opts),
    batch: (requests, opts) => call("POST", "/1/batch", { requests }, opts),
    run: async (name, params, opts) =>
      (await call("POST", "/1/functions/" + enc(name), params || {}, opts)).result,
    users: Object.freeze({
      get: (id, opts) => Basalt.get("_User", id, opts),
      query: (params, opts) => Basalt.query("_User", params, opts),
      find: (params, opts) => Basalt.find("_User", params, opts),
      first: (params, opts) => Basalt.first("_User", params, opts),
      count: (where, opts) => Basalt.count("_User", where, opts),
    }),
  };
  Object.defineProperty(globalThis, "Basalt", { value: Object.freeze(Basalt), enumerable: true });

  let nextTimer = 1;
  const cleared = new Set();
  globalThis.setTimeout = function (fn, ms, ...args) {
    const id = nextTimer++;
    host("sleep", { ms: Number(ms) || 0 }).then(() => {
      if (!cleared.delete(id) && typeof fn === "function") fn(...args);
    });
    return id;
  };
  globalThis.clearTimeout = function (id) {
    cleared.add(id);
  };

  globalThis.fetch = async function (url, init) {
    init = init || {};
    let body = init.body;
    if (body !== undefined && body !== null && typeof body !== "string") body = JSON.stringify(body);
    const r = await host("fetch", {
      url: String(url),
      method: init.method || "GET",
      headers: init.headers || {},
      body: body === undefined ? null : body,
    });
    return {
      status: r.status,
      ok: r.status >= 200 && r.status < 300,
      headers: r.headers,
      text: async () => r.body,
      json: async () => JSON.parse(r.body),
    };
  };
})();
