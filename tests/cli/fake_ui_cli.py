"""``mrbench ui`` with a stand-in for the MLflow server, which starts in a second instead of tens:
``python fake_ui_cli.py ui --port PORT ...`` runs mrbench's entry point with
:func:`mrbench.cli.commands.ui.ui_command` replaced by a small HTTP server that prints as MLflow's
does (a line on stdout at start, a library warning on stderr, an access-log line per request)."""

from __future__ import annotations

import sys

from mrbench.cli.app import app, main
from mrbench.cli.commands import ui

STARTED = "fake server: starting"
WARNING = "FakeDeprecationWarning: a library's deprecation"

FAKE_SERVER = f"""
import http.server, sys
print({STARTED!r}, flush=True)
print({WARNING!r}, file=sys.stderr, flush=True)

class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Page).serve_forever()
"""


def fake_command(tracking_uri: str, port: int) -> list[str]:
    """The stand-in server's command line, serving on ``127.0.0.1:port``."""
    return [sys.executable, "-c", FAKE_SERVER, str(port)]


if __name__ == "__main__":
    ui.ui_command = fake_command
    sys.argv[0] = "mrbench"
    main(app)
