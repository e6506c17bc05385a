"""A tracking "server" that never answers, for the store and CLI fault tests."""

from __future__ import annotations

import socket
import threading


class HangingServer:
    """A port on 127.0.0.1 that accepts connections and never answers (a hung server); counts them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.uri = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)  # held open, never read nor answered

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()
