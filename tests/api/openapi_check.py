#!/usr/bin/python3
"""openapi_check.py - checks recorded HTTP exchanges against pgpace's OpenAPI 3.1 document
(src/api/openapi.json), and the document itself.

Python 3 standard library plus jsonschema (Debian 12: python3-jsonschema 4.10); nothing local.

Module contract:
- load(doc_path) -> dict: the document, parsed.
- check_document(doc) -> list[str]: structural problems, empty when none: `openapi` is 3.1.x,
  every local $ref resolves (and no other kind of $ref is used), every operation has a unique
  operationId, responses and a tags list, every {name} of a path template is declared as a
  required path parameter (path item or operation level) and every declared path parameter is
  in the template, two templates do not differ only in their parameters' names, and every
  schema under components/schemas is a valid Draft 2020-12 schema.
- check_exchange(doc, ex) -> list[str]: how one exchange departs from the document, empty when
  it conforms. ex is a dict:
      {"method": "GET", "path": "/v1/customers/acme?limit=5", "status": 200,
       "content_type": "application/json", "headers": {"etag": "..."}, "body": <JSON or None>}
  "headers" (lower-case names) is optional: without it headers are not checked. The path may
  carry a query string and percent-escapes.
  - The path template: literal segments match the (percent-decoded) segment exactly, {name}
    matches any one non-empty segment; of several matching templates the one whose first
    differing segment is literal wins (/v1/dead-letters/replay over a template there).
  - The operation by method; HEAD is checked as GET and must have no body. A method a known
    path does not document may be answered 405 (the response x-method-not-allowed of the path
    item, else of the document), with an Allow header that lists exactly the path's documented
    methods (HEAD aside) when the method is one the API takes (GET, HEAD, POST, PATCH,
    DELETE; for any other method Allow must only be present), or with an error status from
    400 on that one of the path's documented operations answers (a refusal made before the
    method is looked at: no token, a body, an id that is no number), checked against that
    operation's response; anything else is a mismatch.
  - The response by status, then its "4XX"-style range, then "default"; an undocumented
    path, method or status is a mismatch.
  - The media type of Content-Type (parameters ignored) must be one the response documents;
    a response without content (204) must have no body; one with content must have a body
    (except for HEAD).
  - Headers the response declares required must be present; a header with a schema is
    validated against it.
  - Query parameters: on answers below 400, a parameter the operation does not declare is a
    mismatch, and a declared one is validated against its schema (after turning "true"/"false"
    into a boolean and digits into an integer where the schema's type says so). A 4xx answer to
    an unknown or bad parameter is the documented behaviour, so those are not checked then.
  - The body is validated with jsonschema.Draft202012Validator against the media type's
    schema, $refs resolved in the document (jsonschema.RefResolver.from_schema(doc)); `format`
    is not asserted.
- check_exchanges(doc, exchanges) -> list[str]: each mismatch prefixed "METHOD PATH STATUS: ".

CLI:
    openapi_check.py DOC [EXCHANGES.jsonl ...]
        Checks the document, then every exchange (one JSON object a line; blank lines and lines
        starting with # are skipped). Prints each problem (the exchange's file:line, method,
        path and status first); exits 1 if any, else prints "ok: N exchanges" and exits 0.
    openapi_check.py --self-test [DOC]
        Runs built-in checks of hand-made conforming and non-conforming exchanges against the
        document (default: src/api/openapi.json beside this tree); exits 1 on a failure.
"""

import copy
import json
import os
import re
import sys
import urllib.parse

import jsonschema

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
API_METHODS = {"GET", "HEAD", "POST", "PATCH", "DELETE"}
MAX_MESSAGE = 300


def load(doc_path):
    """The OpenAPI document at doc_path, parsed."""
    with open(doc_path, encoding="utf-8") as f:
        return json.load(f)


# ---- references ------------------------------------------------------------------------------

def _pointer(doc, ref):
    """The value a local $ref ("#/a/b") names; KeyError when it names nothing."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise KeyError(ref)
    node = doc
    frag = ref[1:]
    if frag == "":
        return node
    if not frag.startswith("/"):
        raise KeyError(ref)
    for part in frag[1:].split("/"):
        part = urllib.parse.unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(ref)
    return node


def _deref(doc, node, depth=0):
    """node with a $ref of an OpenAPI object (parameter, response, header...) followed."""
    while isinstance(node, dict) and "$ref" in node and depth < 20:
        node = _pointer(doc, node["$ref"])
        depth += 1
    return node


def _walk(node, where=""):
    """(json path, dict) of every object in node."""
    if isinstance(node, dict):
        yield where, node
        for k, v in node.items():
            yield from _walk(v, where + "/" + str(k).replace("~", "~0").replace("/", "~1"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, where + "/" + str(i))


# ---- the document ----------------------------------------------------------------------------

_TEMPLATE_PARAM = re.compile(r"\{([^{}/]+)\}")


def _operations(doc):
    """(path, method, path item, operation) of every operation."""
    for path, item in (doc.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        for m in METHODS:
            if isinstance(item.get(m), dict):
                yield path, m, item, item[m]


def _params(doc, item, operation, where):
    """The parameters of an operation: the path item's, overridden by the operation's
    (keyed by (in, name))."""
    out = {}
    for src in (item.get("parameters") or [], (operation or {}).get("parameters") or []):
        for p in src:
            try:
                p = _deref(doc, p)
            except KeyError:
                continue
            if isinstance(p, dict) and "name" in p and p.get("in") == where:
                out[p["name"]] = p
    return out


def check_document(doc):
    """Structural problems of an OpenAPI 3.1 document; empty when none."""
    problems = []
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    if not str(doc.get("openapi", "")).startswith("3.1"):
        problems.append("openapi is %r, not 3.1.x" % (doc.get("openapi"),))
    if not isinstance(doc.get("paths"), dict) or not doc["paths"]:
        problems.append("no paths")
    for where, node in _walk(doc):
        if "$ref" in node and isinstance(node["$ref"], str):
            r = node["$ref"]
            if not r.startswith("#"):
                problems.append("%s: $ref %s is not local" % (where or "/", r))
                continue
            try:
                _pointer(doc, r)
            except KeyError:
                problems.append("%s: $ref %s does not resolve" % (where or "/", r))
    seen = {}
    shapes = {}
    for path in (doc.get("paths") or {}):
        shape = _TEMPLATE_PARAM.sub("{}", path)
        if shape in shapes and shapes[shape] != path:
            problems.append("paths %s and %s differ only in their parameters' names"
                            % (shapes[shape], path))
        shapes.setdefault(shape, path)
    for path, method, item, operation in _operations(doc):
        label = "%s %s" % (method.upper(), path)
        oid = operation.get("operationId")
        if not isinstance(oid, str) or not oid:
            problems.append("%s: no operationId" % label)
        elif oid in seen:
            problems.append("%s: operationId %s is also %s's" % (label, oid, seen[oid]))
        else:
            seen[oid] = label
        if not isinstance(operation.get("responses"), dict) or not operation["responses"]:
            problems.append("%s: no responses" % label)
        else:
            for status, resp in operation["responses"].items():
                if not re.fullmatch(r"[1-5](\d\d|XX)|default", status):
                    problems.append("%s: response key %r is not a status" % (label, status))
                try:
                    resp = _deref(doc, resp)
                except KeyError:
                    continue
                if not isinstance(resp, dict) or "description" not in resp:
                    problems.append("%s %s: the response has no description" % (label, status))
        if not isinstance(operation.get("tags"), list) or not operation["tags"]:
            problems.append("%s: no tags" % label)
        if not isinstance(operation.get("summary"), str) or not operation["summary"]:
            problems.append("%s: no summary" % label)
        in_template = set(_TEMPLATE_PARAM.findall(path))
        declared = _params(doc, item, operation, "path")
        for name in sorted(in_template - set(declared)):
            problems.append("%s: path parameter {%s} is not declared" % (label, name))
        for name in sorted(set(declared) - in_template):
            problems.append("%s: path parameter %s is not in the path" % (label, name))
        for name, p in declared.items():
            if p.get("required") is not True:
                problems.append("%s: path parameter %s is not required: true" % (label, name))
    schemas = ((doc.get("components") or {}).get("schemas") or {})
    for name, schema in schemas.items():
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.exceptions.SchemaError as e:
            problems.append("components/schemas/%s: not a valid schema: %s"
                            % (name, _short(e.message)))
    return problems


# ---- one exchange ----------------------------------------------------------------------------

def _short(text):
    text = str(text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


def _segments(path):
    """The raw segments of a path ("/v1/a/b" -> ["v1", "a", "b"])."""
    return path.split("/")[1:] if path.startswith("/") else path.split("/")


def _match_path(doc, path):
    """(template, {name: decoded value}) of the best matching path template, or (None, None)."""
    raw = _segments(path)
    decoded = [urllib.parse.unquote(s, errors="strict") if "%" in s else s for s in raw]
    best = None
    for template in (doc.get("paths") or {}):
        tsegs = _segments(template)
        if len(tsegs) != len(raw):
            continue
        values = {}
        rank = []
        ok = True
        for t, r, d in zip(tsegs, raw, decoded):
            m = re.fullmatch(r"\{([^{}/]+)\}", t)
            if m:
                if r == "":
                    ok = False
                    break
                values[m.group(1)] = d
                rank.append(0)
            elif t == d:
                rank.append(1)
            else:
                ok = False
                break
        if ok and (best is None or rank > best[0]):
            best = (rank, template, values)
    return (best[1], best[2]) if best else (None, None)


def _validator(doc, schema):
    return jsonschema.Draft202012Validator(
        schema, resolver=jsonschema.RefResolver.from_schema(doc))


def _schema_errors(doc, schema, instance, what):
    out = []
    errors = sorted(_validator(doc, schema).iter_errors(instance),
                    key=lambda e: (list(e.absolute_path), e.message))
    for e in errors[:10]:
        at = "/".join(str(p) for p in e.absolute_path)
        out.append(_short("%s%s: %s" % (what, " at /" + at if at else "", e.message)))
    if len(errors) > 10:
        out.append("%s: %d more errors" % (what, len(errors) - 10))
    return out


def _coerce(schema, doc, value):
    """A query parameter's text as the schema's type wants it (boolean, integer), else as is."""
    try:
        schema = _deref(doc, schema)
    except KeyError:
        return value
    t = schema.get("type") if isinstance(schema, dict) else None
    types = t if isinstance(t, list) else [t]
    if "boolean" in types and value in ("true", "false"):
        return value == "true"
    if ("integer" in types or "number" in types) and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    if "number" in types and re.fullmatch(r"-?[0-9]+\.[0-9]+", value):
        return float(value)
    return value


def _pick_response(responses, status):
    for key in (str(status), "%sXX" % str(status)[0], "default"):
        if key in responses:
            return key, responses[key]
    return None, None


def _allow_methods(value):
    return {m.strip().upper() for m in str(value).split(",") if m.strip()}


def check_exchange(doc, ex):
    """How one exchange departs from the document; empty when it conforms."""
    problems = []
    method = str(ex.get("method", "")).upper()
    url = str(ex.get("path", ""))
    status = ex.get("status")
    body = ex.get("body")
    headers = ex.get("headers")
    if headers is not None:
        headers = {str(k).lower(): v for k, v in headers.items()}
    path, _, query = url.partition("?")
    query = query.partition("#")[0]
    try:
        template, _values = _match_path(doc, path)
    except UnicodeDecodeError:
        template = None
    if template is None:
        return ["path %s is not documented" % path]
    item = doc["paths"][template]
    op_method = "get" if method == "HEAD" else method.lower()
    operation = item.get(op_method) if op_method in METHODS else None
    if not isinstance(operation, dict):
        documented = {m.upper() for m in METHODS if isinstance(item.get(m), dict)}
        if isinstance(status, int) and status >= 400 and status != 405:
            # Refused before the method was looked at (token, body, id): any documented
            # operation of the path says how that refusal looks.
            for m in METHODS:
                if isinstance(item.get(m), dict):
                    key, response = _pick_response(item[m].get("responses") or {}, status)
                    if response is not None and key != "default":
                        return _check_response(doc, ex, method, key, response, headers, body)
        if status != 405:
            return ["%s %s is not documented (only %s)"
                    % (method, template, ", ".join(sorted(documented)))]
        response = item.get("x-method-not-allowed") or doc.get("x-method-not-allowed")
        if response is None:
            return ["%s %s is not documented and no x-method-not-allowed says how a 405 looks"
                    % (method, template)]
        problems += _check_response(doc, ex, method, "405", response, headers, body)
        if headers is not None and "allow" in headers and method in API_METHODS:
            allow = _allow_methods(headers["allow"]) - {"HEAD"}
            want = documented - {"HEAD"}
            if allow != want:
                problems.append("Allow lists %s; %s documents %s"
                                % (", ".join(sorted(allow)) or "nothing", template,
                                   ", ".join(sorted(want))))
        return problems
    if method == "HEAD" and body is not None:
        problems.append("HEAD answered with a body")
    if not isinstance(status, int):
        return problems + ["status %r is not an integer" % (status,)]
    key, response = _pick_response(operation.get("responses") or {}, status)
    if response is None:
        return problems + ["status %d is not documented for %s %s"
                           % (status, method, template)]
    if status < 400:
        declared = _params(doc, item, operation, "query")
        for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
            if name not in declared:
                problems.append("query parameter %s is not documented for %s %s"
                                % (name, method, template))
            elif "schema" in declared[name]:
                schema = declared[name]["schema"]
                problems += _schema_errors(doc, schema, _coerce(schema, doc, value),
                                           "query parameter %s" % name)
    problems += _check_response(doc, ex, method, key, response, headers, body)
    return problems


def _check_response(doc, ex, method, key, response, headers, body):
    problems = []
    try:
        response = _deref(doc, response)
    except KeyError:
        return ["response %s: its $ref does not resolve" % key]
    content = response.get("content") or {}
    ctype = str(ex.get("content_type") or "").split(";")[0].strip().lower()
    if not content:
        if body is not None:
            problems.append("response %s has no body, but the answer has one" % key)
    elif body is None:
        if method != "HEAD":
            problems.append("response %s has a body (%s), the answer none"
                            % (key, ", ".join(sorted(content))))
    else:
        media = None
        for name, m in content.items():
            if name.lower() == ctype:
                media = m
        if media is None:
            problems.append("content type %r is not documented for response %s (%s)"
                            % (ctype, key, ", ".join(sorted(content))))
        elif isinstance(media, dict) and "schema" in media:
            problems += _schema_errors(doc, media["schema"], body, "body")
    if headers is not None:
        for name, h in (response.get("headers") or {}).items():
            try:
                h = _deref(doc, h)
            except KeyError:
                problems.append("header %s: its $ref does not resolve" % name)
                continue
            value = headers.get(name.lower())
            if value is None:
                if h.get("required"):
                    problems.append("header %s is missing (response %s requires it)"
                                    % (name, key))
            elif "schema" in h:
                problems += _schema_errors(doc, h["schema"], value, "header %s" % name)
    return problems


def check_exchanges(doc, exchanges):
    """Every mismatch of every exchange, each prefixed with its method, path and status."""
    out = []
    for ex in exchanges:
        for m in check_exchange(doc, ex):
            out.append("%s %s %s: %s" % (ex.get("method"), ex.get("path"), ex.get("status"), m))
    return out


# ---- self-test -------------------------------------------------------------------------------

T = "2026-11-29T11:28:24.696022Z"
ETAG = '"0123456789abcdef0123"'


def _receiver(**over):
    r = {"webhook_url": "https://hooks.example.com/x", "mode": "spaced", "rate_per_minute": 60,
         "burst": 1, "limits": [], "ratelimit_headers": True, "max_in_flight": None,
         "max_attempts": 12, "paused": False, "disabled_at": None, "disabled_reason": None,
         "connect_timeout_ms": None, "request_timeout_ms": None, "throttle_decrease": None,
         "throttle_increase": None, "throttle_floor": None, "max_age_seconds": None,
         "order_on_dead": "skip", "header_names": [], "auth_scheme": None,
         "signing_secrets": 1, "created_at": T, "updated_at": T}
    r.update(over)
    return r


def _customer(**over):
    c = dict(_receiver(), name="acme", endpoints=1)
    c.update(over)
    return c


def _endpoint(**over):
    e = dict(_receiver(), customer="tenant", name="crm", event_types=["a", "b.*"],
             payload_filter=None, state="active", queued=0,
             throttle={"in_flight": 0, "due": 0, "dead": 0, "effective_rate_per_minute": 60},
             health={"breaker": "closed", "failures": 0, "open_until": None,
                     "failing_since": None})
    e.update(over)
    return e


def _problem(status, slug, title, detail="x", **over):
    p = {"type": "urn:pgpace:problem:" + slug, "title": title, "status": status,
         "detail": detail}
    p.update(over)
    return p


def _ex(method, path, status, body=None, headers=None, ctype=None):
    if ctype is None:
        ctype = ("" if status == 204 else
                 "application/problem+json" if status >= 400 else "application/json")
    ex = {"method": method, "path": path, "status": status, "content_type": ctype,
          "body": body}
    if headers is not None:
        ex["headers"] = headers
    return ex


def _self_test_cases():
    """(name, exchange, conforms)."""
    delivery = {"id": 178550380429314, "event_id": 178550380429313, "customer": "tenant",
                "endpoint": "crm", "kind": "a", "created_at": T, "attempt_count": 1,
                "last_attempt": {"at": T, "http_status": None, "outcome": "retry",
                                 "error_class": "connect"},
                "status": "retrying"}
    detail = dict(delivery, attempts=[{"attempt": 1, "started_at": T, "duration_ms": 2.5,
                                       "http_status": None, "outcome": "retry",
                                       "error_class": "connect", "response_excerpt": None}])
    event = {"id": 178550380429313, "customer": "tenant", "kind": "a", "status": "pending",
             "priority": 0, "created_at": T, "run_at": T, "delivery_count": 1}
    attempt = {"attempt": 1, "started_at": T, "duration_ms": 2.5, "http_status": None,
               "outcome": "retry", "error_class": "connect", "response_excerpt": None}
    bad_req = _problem(400, "invalid-request", "Bad Request", field="limit")
    return [
        ("list customers", _ex("GET", "/v1/customers?limit=5",
                               200, {"items": [_customer()], "next_cursor": None}, {}), True),
        ("list customers, cursor", _ex("GET", "/v1/customers?limit=1&cursor=Y3VzdG9tZXI6YQ",
                                       200, {"items": [_customer()],
                                             "next_cursor": "Y3VzdG9tZXI6YWNtZQ"}), True),
        ("a member the document lacks", _ex("GET", "/v1/customers", 200,
                                            {"items": [_customer(colour="red")],
                                             "next_cursor": None}), False),
        ("a required member missing", _ex("GET", "/v1/customers", 200, {"items": [
            {k: v for k, v in _customer().items() if k != "burst"}], "next_cursor": None}),
         False),
        ("a time without microseconds", _ex("GET", "/v1/customers/acme", 200,
                                            _customer(created_at="2026-11-29T11:28:24Z"),
                                            {"etag": ETAG}), False),
        ("get customer with ETag", _ex("GET", "/v1/customers/acme", 200, _customer(),
                                       {"etag": ETAG}), True),
        ("get customer, percent-encoded name", _ex("GET", "/v1/customers/a%40b%3Ac", 200,
                                                   _customer(name="a@b:c"), {"etag": ETAG}),
         True),
        ("HEAD as GET without a body", _ex("HEAD", "/v1/customers/acme", 200, None,
                                           {"etag": ETAG}), True),
        ("HEAD with a body", _ex("HEAD", "/v1/customers/acme", 200, _customer(),
                                 {"etag": ETAG}), False),
        ("get customer without its ETag", _ex("GET", "/v1/customers/acme", 200, _customer(),
                                              {}), False),
        ("headers not recorded: not checked", _ex("GET", "/v1/customers/acme", 200,
                                                  _customer()), True),
        ("create customer", _ex("POST", "/v1/customers", 201,
                                _customer(signing_secret="whsec_abc"),
                                {"etag": ETAG, "location": "/v1/customers/acme"}), True),
        ("create customer without Location", _ex("POST", "/v1/customers", 201, _customer(),
                                                 {"etag": ETAG}), False),
        ("rotate-secret needs the secret", _ex("POST", "/v1/customers/acme/rotate-secret", 200,
                                               _customer(), {"etag": ETAG}), False),
        ("rotate-secret with retire_old", _ex("POST",
                                              "/v1/customers/acme/rotate-secret?retire_old=true",
                                              200, _customer(signing_secret="whsec_abc"),
                                              {"etag": ETAG}), True),
        ("a bad boolean query value", _ex("POST",
                                          "/v1/customers/acme/rotate-secret?retire_old=yes",
                                          200, _customer(signing_secret="whsec_abc"),
                                          {"etag": ETAG}), False),
        ("delete: 204 without a body", _ex("DELETE", "/v1/customers/acme?force=true", 204,
                                           None, {}), True),
        ("delete: 204 with a body", _ex("DELETE", "/v1/customers/acme", 204, {"x": 1}, {}),
         False),
        ("an unknown query parameter on a 200", _ex("GET", "/v1/customers?colour=red", 200,
                                                    {"items": [], "next_cursor": None}), False),
        ("an unknown query parameter refused", _ex("GET", "/v1/customers?colour=red", 400,
                                                   _problem(400, "invalid-request",
                                                            "Bad Request", field="colour")),
         True),
        ("limit out of range on a 200", _ex("GET", "/v1/events?limit=501", 200,
                                            {"items": [], "next_cursor": None}), False),
        ("problem with field", _ex("GET", "/v1/events?limit=0", 400, bad_req), True),
        ("problem served as application/json", _ex("GET", "/v1/events?limit=0", 400, bad_req,
                                                   ctype="application/json"), False),
        ("problem whose status disagrees", _ex("GET", "/v1/customers/x", 404,
                                               _problem(400, "invalid-request", "Bad Request")),
         False),
        ("problem with another member", _ex("GET", "/v1/customers/x", 404,
                                            _problem(404, "not-found", "Not Found", extra=1)),
         False),
        ("an undocumented status", _ex("GET", "/v1/customers", 418, _problem(
            418, "error", "Error")), False),
        ("an undocumented path", _ex("GET", "/v1/nothing", 404,
                                     _problem(404, "not-found", "Not Found")), False),
        ("literal beats template", _ex("POST", "/v1/dead-letters/replay", 200,
                                       {"replayed": 2, "refused": 0}), True),
        ("item replay", _ex("POST", "/v1/dead-letters/178550380429315/replay", 200,
                            {"replayed": 1, "refused": 0}), True),
        ("purge answers purged, not replayed", _ex("POST", "/v1/dead-letters/purge", 200,
                                                   {"replayed": 2, "refused": 0}), False),
        ("405 with the path's methods", _ex("DELETE", "/v1/customers/acme/pause", 405,
                                            _problem(405, "method-not-allowed",
                                                     "Method Not Allowed",
                                                     "allowed here: POST"),
                                            {"allow": "POST"}), True),
        ("405 listing a method not documented", _ex(
            "POST", "/v1/portal/endpoints/crm", 405,
            _problem(405, "method-not-allowed", "Method Not Allowed"),
            {"allow": "GET, PATCH, DELETE"}), False),
        ("405 without Allow", _ex("DELETE", "/v1/customers/acme/pause", 405,
                                  _problem(405, "method-not-allowed", "Method Not Allowed"),
                                  {}), False),
        ("PUT: the listener's 405", _ex("PUT", "/v1/customers", 405,
                                        _problem(405, "method-not-allowed", "Method Not Allowed"),
                                        {"allow": "GET, POST, PATCH, DELETE"}), True),
        ("an undocumented method answered 200", _ex("PUT", "/v1/customers", 200, {}), False),
        ("an undocumented method refused for its token", _ex(
            "PUT", "/v1/customers", 401, _problem(401, "unauthorized", "Unauthorized"),
            {"www-authenticate": 'Bearer realm="pgpace"'}), True),
        ("an undocumented method, a status no operation has", _ex(
            "DELETE", "/v1/events", 412, _problem(412, "precondition-failed",
                                                  "Precondition Failed")), False),
        ("401 with its challenge", _ex("GET", "/v1/customers", 401,
                                       _problem(401, "unauthorized", "Unauthorized"),
                                       {"www-authenticate": 'Bearer realm="pgpace"'}), True),
        ("401 without WWW-Authenticate", _ex("GET", "/v1/portal", 401,
                                             _problem(401, "unauthorized", "Unauthorized"),
                                             {}), False),
        ("428", _ex("PATCH", "/v1/customers/acme", 428,
                    _problem(428, "precondition-required", "Precondition Required",
                             field="If-Match")), True),
        ("endpoint", _ex("GET", "/v1/customers/tenant/endpoints/crm", 200, _endpoint(),
                         {"etag": ETAG}), True),
        ("endpoint without health", _ex("GET", "/v1/customers/tenant/endpoints/crm", 200,
                                        {k: v for k, v in _endpoint().items() if k != "health"},
                                        {"etag": ETAG}), False),
        ("event list", _ex("GET", "/v1/events?status=pending&customer=tenant", 200,
                           {"items": [event], "next_cursor": None}), True),
        ("event list, a delivery status", _ex("GET", "/v1/events?status=dead", 200,
                                              {"items": [], "next_cursor": None}), True),
        ("event with a null kind (stripped there)", _ex("GET", "/v1/events", 200, {
            "items": [dict(event, kind=None)], "next_cursor": None}), False),
        ("event detail", _ex("GET", "/v1/events/178550380429313", 200,
                             dict(event, deliveries=[detail], payload={"a": 1})), True),
        ("delivery list, a bad status filter", _ex("GET", "/v1/deliveries?status=pending", 200,
                                                   {"items": [], "next_cursor": None}), False),
        ("delivery detail", _ex("GET", "/v1/deliveries/178550380429314", 200, detail), True),
        ("attempts: every member present", _ex("GET", "/v1/deliveries/1/attempts", 200,
                                               {"items": [attempt]}), True),
        ("attempts: a member absent", _ex("GET", "/v1/deliveries/1/attempts", 200, {
            "items": [{k: v for k, v in attempt.items() if v is not None}]}), False),
        ("enqueue", _ex("POST", "/v1/items", 201,
                        {"id": 178490250887170, "estimated_send_at": T}), True),
        ("enqueue duplicate", _ex("POST", "/v1/items", 200,
                                  {"id": 178490250887170, "duplicate": True,
                                   "estimated_send_at": None}), True),
        ("enqueue error keeps its shape", _ex("POST", "/v1/items", 400,
                                              {"error": "field customer: unknown customer 'x'"},
                                              ctype="application/json"), True),
        ("enqueue error as a problem", _ex("POST", "/v1/items", 400, bad_req), False),
        ("enqueue GET", _ex("GET", "/v1/items", 405, {"error": "method not allowed"},
                            {"allow": "POST"}, ctype="application/json"), True),
        ("openapi.json", _ex("GET", "/v1/openapi.json", 200,
                             {"openapi": "3.1.0", "info": {}, "paths": {}}), True),
        ("portal test event", _ex("POST", "/v1/portal/test-event", 201,
                                  {"id": 1, "deliveries": None}), True),
    ]


def _broken_document(doc):
    bad = copy.deepcopy(doc)
    bad["openapi"] = "3.0.3"
    ops = list(_operations(bad))
    ops[1][3]["operationId"] = ops[0][3]["operationId"]
    ops[2][3]["responses"] = {}
    bad["paths"]["/v1/things/{thing}"] = {"get": {
        "operationId": "getThing", "summary": "x", "tags": ["x"],
        "responses": {"200": {"$ref": "#/components/responses/Nothing"}}}}
    return bad


def self_test(doc_path):
    failures = []
    doc = load(doc_path)
    problems = check_document(doc)
    if problems:
        failures += ["the document: " + p for p in problems]
    bad = check_document(_broken_document(doc))
    for want in ("openapi is", "operationId", "no responses", "{thing} is not declared",
                 "does not resolve"):
        if not any(want in p for p in bad):
            failures.append("check_document misses a broken document's %r (got %s)"
                            % (want, bad))
    cases = _self_test_cases()
    for name, ex, conforms in cases:
        got = check_exchange(doc, ex)
        if conforms and got:
            failures.append("%s: expected no mismatch, got %s" % (name, got))
        elif not conforms and not got:
            failures.append("%s: expected a mismatch, got none" % name)
    for f in failures:
        print("FAIL " + f)
    print("self-test: %d checks, %d failed" % (len(cases) + 2, len(failures)))
    return 1 if failures else 0


# ---- CLI -------------------------------------------------------------------------------------

def _default_doc():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "src", "api", "openapi.json")


def main(argv):
    if argv and argv[0] == "--self-test":
        if len(argv) > 2:
            print("usage: openapi_check.py --self-test [DOC]", file=sys.stderr)
            return 2
        return self_test(argv[1] if len(argv) > 1 else _default_doc())
    if not argv or argv[0].startswith("-"):
        print("usage: openapi_check.py DOC [EXCHANGES.jsonl ...] | --self-test [DOC]",
              file=sys.stderr)
        return 2
    try:
        doc = load(argv[0])
    except (OSError, ValueError) as e:
        print("%s: %s" % (argv[0], e))
        return 1
    bad = 0
    for p in check_document(doc):
        print("%s: %s" % (argv[0], p))
        bad += 1
    n = 0
    for name in argv[1:]:
        try:
            f = open(name, encoding="utf-8")
        except OSError as e:
            print("%s: %s" % (name, e))
            bad += 1
            continue
        with f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    ex = json.loads(line)
                    if not isinstance(ex, dict):
                        raise ValueError("not a JSON object")
                except ValueError as e:
                    print("%s:%d: not an exchange: %s" % (name, lineno, e))
                    bad += 1
                    continue
                n += 1
                for m in check_exchange(doc, ex):
                    print("%s:%d: %s %s %s: %s" % (name, lineno, ex.get("method"),
                                                   ex.get("path"), ex.get("status"), m))
                    bad += 1
    if bad:
        return 1
    print("ok: %d exchanges" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
