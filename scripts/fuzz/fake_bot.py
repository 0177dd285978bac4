"""A stand-in Telegram Bot API for `make fuzz`, on loopback only — and Monobank's public key.

The server under test is given TELEGRAM_API_URL pointing here, so the calls it makes while the
fuzzer drives it (invoice links, the effects worker's grants, revokes and receipts) succeed
instead of failing for want of Telegram. Every method answers `ok` with a plausible result.

MONOBANK_API_URL points here too: `GET /api/merchant/pubkey` answers the public key of the pair
scripts/fuzz-api.sh made (as Monobank does: base64 of the PEM), so door 5 can verify the reports
hooks.py signs with its private key.

Usage: python3 fake_bot.py PORT [MONOBANK_PUBLIC_KEY_PEM_FILE]
"""

import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RESULTS = {
    "createChatInviteLink": {"invite_link": "https://t.me/+fuzz", "creates_join_request": True},
    "createInvoiceLink": "https://t.me/$fuzz-invoice",
    "getStarTransactions": {"transactions": []},
    "sendMessage": {"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}},
}


MONOBANK_KEY = None


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path != "/api/merchant/pubkey" or MONOBANK_KEY is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"key": MONOBANK_KEY}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        method = self.path.rsplit("/", 1)[-1]
        body = json.dumps({"ok": True, "result": RESULTS.get(method, True)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    if len(sys.argv) > 2:
        with open(sys.argv[2], "rb") as pem:
            MONOBANK_KEY = base64.b64encode(pem.read()).decode()
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
