"""Screenshot of what `mrbench ui SWEEP` opens, as in the README: headless Chromium on the URL it prints.

    python scripts/screenshot_ui.py smoke                 # the default store -> docs/images/mlflow-ui.png
    python scripts/screenshot_ui.py smoke --tracking-uri sqlite:////tmp/ui/shot/mlflow.db

Starts ``mrbench ui SWEEP`` on a free port of 127.0.0.1, waits for the URL it prints, runs
``chromium --headless --screenshot=OUT --window-size=1400,900 URL`` and stops the UI with SIGINT.
``mrbench ui`` saves its comparison view on the sweep's experiment, so point it at a copy of a
store you do not want written. Needs Debian's chromium (``apt-get install -y chromium``).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="the sweep (MLflow experiment) to open")
    parser.add_argument(
        "--tracking-uri", help="MLflow store (default: mrbench's, sqlite:///results/mlflow.db)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "mlflow-ui.png")
    parser.add_argument("--window-size", default="1400,900", help="browser window, WIDTH,HEIGHT pixels")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium binary; install it: apt-get update && apt-get install -y chromium")

    command = [sys.executable, "-m", "mrbench", "ui", args.sweep, "--port", str(free_port())]
    command += ["--tracking-uri", args.tracking_uri] if args.tracking_uri else []
    ui = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(ui.stdout.readline, "")), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline and ui.poll() is None:
            url = next((line.split(" ", 1)[1].strip() for line in lines if line.startswith("ready: ")), None)
            time.sleep(0.3)
        if url is None:
            sys.exit("`mrbench ui` did not print its URL:\n" + "".join(lines))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shot = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        shot += [f"--screenshot={args.out}", f"--window-size={args.window_size}"]
        subprocess.run(
            [*shot, "--virtual-time-budget=30000", url], check=True, capture_output=True, timeout=180
        )
        print(f"{args.out}: {url}")
    finally:
        if ui.poll() is None:
            ui.send_signal(signal.SIGTERM)  # like Ctrl-C: `mrbench ui` stops the server it started
        ui.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
