"""A small Chrome DevTools Protocol client for the tests: headless Chromium
driven over its debugging WebSocket, with a client of a few dozen lines on a
plain socket (no dependency), so that a test can press keys, click, read the
page and catch its console errors.

    with Browser(CHROMIUM, tmp_path) as browser:
        tab = browser.tab(url)
        tab.key("1"); tab.wait_idle(); tab.eval("document.title")
"""
from __future__ import annotations

import base64
import json
import os
import re
import select
import socket
import struct
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

TIMEOUT = 60.0    # one command's answer; a busy 2-core machine is slow, never this slow


class CDPError(RuntimeError):
    """The browser refused a command, or did not answer it."""


class _Socket:
    """A WebSocket client: text frames, masked as a client must."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CDPError("the browser closed the debugging connection")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise CDPError(f"no WebSocket: {head[:200]!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text: str) -> None:
        data = text.encode()
        mask = os.urandom(4)
        size = len(data)
        if size < 126:
            header = struct.pack("!BB", 0x81, 0x80 | size)
        elif size < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, size)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise CDPError("the browser closed the debugging connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def ready(self, timeout: float) -> bool:
        return bool(self.buffer) or bool(select.select([self.sock], [], [], timeout)[0])

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._take(2)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack("!H", self._take(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", self._take(8))[0]
            payload = self._take(size)     # a server's frames are not masked
            opcode = first & 0x0F
            if opcode == 0x8:
                raise CDPError("the browser closed the debugging connection")
            if opcode in (0x1, 0x0, 0x2):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        self.sock.close()


class Browser:
    """Headless Chromium with its own profile, driven through one connection."""

    def __init__(self, chromium: str, folder: Path):
        profile = Path(folder) / "chromium-profile"
        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={profile}",
             "--window-size=1280,800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url, deadline, seen = None, time.monotonic() + TIMEOUT, []
        while url is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            url = found.group(1) if found else None
        if url is None:
            self.proc.kill()
            raise CDPError("Chromium did not start: " + "".join(seen)[-2000:])
        self.ws = _Socket(url)
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        ident = self.next_id
        message = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if not self.ws.ready(1.0):
                continue
            data = json.loads(self.ws.recv())
            if data.get("id") == ident:
                if "error" in data:
                    raise CDPError(f"{method}: {data['error']}")
                return data.get("result", {})
            if "method" in data:
                self.events.append(data)
        raise CDPError(f"{method}: no answer in {TIMEOUT:g} s")

    def tab(self, url: str) -> "Tab":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        tab = Tab(self, session)
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            tab.send(domain)
        tab.send("Emulation.setDeviceMetricsOverride",
                 {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        tab.goto(url)
        return tab

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (CDPError, OSError):
            pass
        self.ws.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Tab:
    """One page of the browser, on its own session."""

    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, params: dict | None = None) -> dict:
        return self.browser.send(method, params, self.session)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'")

    def eval(self, expression: str):
        """The value of a JavaScript expression (a promise is awaited)."""
        got = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                             "returnByValue": True})
        if "exceptionDetails" in got:
            raise CDPError(f"{expression}: {got['exceptionDetails'].get('text')} "
                           f"{got['exceptionDetails'].get('exception', {}).get('description')}")
        return got["result"].get("value")

    def wait_for(self, expression: str, timeout: float = TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise CDPError(f"never true: {expression}")

    def key(self, key: str) -> None:
        """Press and release one key as a person would (keydown, keypress, keyup)."""
        named = {"Enter": 13, "Escape": 27, "Tab": 9}
        code = named.get(key, ord(key.upper()) if len(key) == 1 else 0)
        down = {"type": "keyDown", "key": key, "windowsVirtualKeyCode": code}
        if len(key) == 1:
            down["text"] = key
        elif key == "Enter":
            down["text"] = "\r"
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": key,
                                             "windowsVirtualKeyCode": code})

    def type(self, text: str) -> None:
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def errors(self) -> list[str]:
        """The console's errors and the uncaught exceptions of this tab so far."""
        out = []
        for e in self.browser.events:
            if e.get("sessionId") != self.session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("text")))
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description")))
                                    for a in p.get("args", [])))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(str(p["entry"].get("text")))
        return out
