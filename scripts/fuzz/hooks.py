"""Schemathesis hooks for `make fuzz`: valid signatures for five payment doors.

A signature covers the exact bytes sent, so no static credential in schemathesis.toml can pass
these doors; without one the fuzzer would only ever see 401s there and never reach the parsing,
validation and payment core behind them.

- door 1 (`POST /api/webhook/payment`): schemathesis.toml gives the three Standard Webhooks
  headers the placeholder `signed-by-hooks`. A request carrying all three placeholders gets its
  body serialized here and the headers replaced: a fresh id, the current time and an
  HMAC-SHA256 signature with WEBHOOK_SECRET. A request the fuzzer sent without them, or with an
  invalid value in one (its `ignored_auth` check does both on purpose), is left alone and must
  be refused;
- door 2 (`POST /api/webhook/wayforpay`), whose signature is a body field: when the body is an
  object with a string `merchantSignature`, `merchantAccount` is set to ours and the signature
  computed (HMAC-MD5 with WAYFORPAY_SECRET_KEY over the signed fields, as their JSON text).

- door 4 (`POST /api/webhook/stripe`): schemathesis.toml gives `Stripe-Signature` the same
  placeholder; it is replaced by `t=<now>,v1=<hex HMAC-SHA256 with STRIPE_WEBHOOK_SECRET over
  "t.body">` of the bytes sent.
- door 5 (`POST /api/webhook/monobank`): `X-Sign` the same placeholder; it is replaced by the
  base64 of an ECDSA P-256/SHA-256 signature (DER) of the bytes sent, made by `openssl dgst`
  with the private key of the pair scripts/fuzz-api.sh made (MONOBANK_PRIVATE_KEY, a PEM
  file), whose public key the stand-in serves as Monobank's.
- door 6 (`POST /api/webhook/cryptopay`): `crypto-pay-api-signature` the same placeholder; it
  is replaced by the hex HMAC-SHA256 of the bytes sent, keyed with SHA-256 of CRYPTOPAY_TOKEN.

Door 3's secret header is a static value, given in schemathesis.toml. scripts/fuzz-api.sh
exports the secrets of the server it started.

One failure is set aside (`filter_failure`): "invalid data accepted" for a body of only
whitespace. The JSON extractor reads such a body as none (as `{}`), a documented leniency for
clients that send a bare newline with no body, so where the body is optional it is rightly
accepted.

And one for every staff write: a valid `Idempotency-Key` the fuzzer generated gets a unique
suffix. Generated keys repeat (`0`, `a`, …) across unrelated requests, and a repeated key with
the same request is replayed byte for byte by design — even the 201 of a subscriber deleted
since — which the stateful checks would report as a created resource that vanished. A key in
the quoted form (`"…"`) gets its suffix inside the quotes, so a valid one stays valid and a
malformed one (a bad escape, a bare quote inside) is still refused; a key of other characters is
left as it is, so its refusal is still tested.
"""

import base64
import hashlib
import hmac
import json
import os
import time
import uuid

import re
import subprocess

import schemathesis

SIGNED_FIELDS = (
    "merchantAccount",
    "orderReference",
    "amount",
    "currency",
    "authCode",
    "cardPan",
    "transactionStatus",
    "reasonCode",
)


def _header(headers, name):
    """The header's key in `headers`, matched without case, or None."""
    for key in headers or {}:
        if key.lower() == name:
            return key
    return None


def _wayforpay_text(value):
    """A signed field as the server reads it: a string's content, a number's literal, else ''."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


PLACEHOLDER = "signed-by-hooks"
STANDARD_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


def _sign_standard(case, kwargs):
    keys = [_header(case.headers, name) for name in STANDARD_HEADERS]
    if any(key is None or case.headers[key] != PLACEHOLDER for key in keys):
        return
    body = _body_bytes(case)
    if body is None:
        return  # not JSON (raw bytes): sent unsigned, and refused
    secret = base64.b64decode(os.environ["WEBHOOK_SECRET"].removeprefix("whsec_"))
    msg_id = "msg_" + uuid.uuid4().hex
    timestamp = str(int(time.time()))
    tag = hmac.new(secret, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    for key in keys:
        del case.headers[key]
    case.headers["webhook-id"] = msg_id
    case.headers["webhook-timestamp"] = timestamp
    case.headers["webhook-signature"] = "v1," + base64.b64encode(tag).decode()
    # The exact bytes signed are the bytes sent.
    kwargs["data"] = body


def _body_bytes(case):
    """The JSON bytes of the case's body (b"" for none), or None when it is not JSON."""
    if case.body is None or type(case.body).__name__ == "NotSet":
        return b""
    try:
        return json.dumps(case.body).encode()
    except (TypeError, ValueError):
        return None


def _sign_stripe(case, kwargs):
    key = _header(case.headers, "stripe-signature")
    if key is None or case.headers[key] != PLACEHOLDER:
        return
    body = _body_bytes(case)
    if body is None:
        return  # not JSON (raw bytes): sent unsigned, and refused
    secret = os.environ["STRIPE_WEBHOOK_SECRET"].encode()
    timestamp = str(int(time.time()))
    tag = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    del case.headers[key]
    case.headers["Stripe-Signature"] = f"t={timestamp},v1={tag}"
    kwargs["data"] = body


def _sign_monobank(case, kwargs):
    key = _header(case.headers, "x-sign")
    if key is None or case.headers[key] != PLACEHOLDER:
        return
    body = _body_bytes(case)
    if body is None:
        return  # not JSON (raw bytes): sent unsigned, and refused
    der = subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", os.environ["MONOBANK_PRIVATE_KEY"]],
        input=body,
        capture_output=True,
        check=True,
    ).stdout
    del case.headers[key]
    case.headers["X-Sign"] = base64.b64encode(der).decode()
    kwargs["data"] = body


def _sign_cryptopay(case, kwargs):
    key = _header(case.headers, "crypto-pay-api-signature")
    if key is None or case.headers[key] != PLACEHOLDER:
        return
    body = _body_bytes(case)
    if body is None:
        return  # not JSON (raw bytes): sent unsigned, and refused
    secret = hashlib.sha256(os.environ["CRYPTOPAY_TOKEN"].encode()).digest()
    del case.headers[key]
    case.headers["crypto-pay-api-signature"] = hmac.new(secret, body, hashlib.sha256).hexdigest()
    kwargs["data"] = body


def _sign_wayforpay(case):
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("merchantSignature"), str):
        return
    body["merchantAccount"] = os.environ["WAYFORPAY_MERCHANT_ACCOUNT"]
    text = ";".join(_wayforpay_text(body.get(field)) for field in SIGNED_FIELDS)
    key = os.environ["WAYFORPAY_SECRET_KEY"].encode()
    body["merchantSignature"] = hmac.new(key, text.encode(), hashlib.md5).hexdigest()


@schemathesis.hook
def filter_failure(ctx, failure, case, response):
    if failure.code != "ST201":
        return True
    body = response.request.body
    if isinstance(body, str):
        body = body.encode()
    return not (isinstance(body, bytes) and body.strip() == b"")


PLAIN_KEY = re.compile(r"[!-~]{1,200}")
QUOTED_KEY = re.compile(r'"[ -~]{0,200}"')


def _unique_idempotency_key(case):
    key = _header(case.headers, "idempotency-key")
    if key is None:
        return
    value = case.headers[key]
    if not isinstance(value, str):
        return
    suffix = f".{uuid.uuid4().hex[:16]}"
    if value == '""':
        return  # the empty quoted key: refused, and left so
    if QUOTED_KEY.fullmatch(value):
        case.headers[key] = value[:-1] + suffix + '"'
    elif PLAIN_KEY.fullmatch(value):
        case.headers[key] = value + suffix


def _spare_the_admin(case):
    """The run's token is the admin's (account 1, the first of a fresh database): a fuzzed
    change of that account (a disabling or a new role, allowed once the fuzzer made another
    owner) would end the token and turn the rest of the run into 401s. Such a request goes to
    an account that does not exist instead; every other account is fuzzed as it comes."""
    params = case.path_parameters or {}
    if case.operation.path == "/api/staff/{id}" and str(params.get("id")) == "1":
        params["id"] = 2147483647


@schemathesis.hook
def before_call(ctx, case, kwargs):
    _unique_idempotency_key(case)
    _spare_the_admin(case)
    path = case.operation.path
    if path == "/api/webhook/payment":
        _sign_standard(case, kwargs)
    elif path == "/api/webhook/wayforpay":
        _sign_wayforpay(case)
    elif path == "/api/webhook/stripe":
        _sign_stripe(case, kwargs)
    elif path == "/api/webhook/monobank":
        _sign_monobank(case, kwargs)
    elif path == "/api/webhook/cryptopay":
        _sign_cryptopay(case, kwargs)
