"""A real headless Chromium (Debian's ``chromium`` package) driven over the DevTools protocol,
for the dashboard's browser tests: open a page, read what a person sees (``text``), wait for
it to change, take a screenshot.

``chromium_path()`` is None when Chromium is not installed; tests then skip with the reason
(``make browser`` installs it: ``apt-get install -y chromium``). The browser runs with a
fresh profile in a temporary directory, ``--no-sandbox`` (tests run as root in CI) and
``--ignore-certificate-errors`` (the test servers' certificates come from a throwaway CA).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

SKIP_REASON = ("Chromium is not installed: `make browser` (apt-get install -y chromium) "
               "installs Debian's package the dashboard's browser tests need")


def chromium_path() -> str | None:
    """The Chromium binary, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page; ``close`` stops it."""

    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        path = chromium_path()
        if path is None:
            raise RuntimeError(SKIP_REASON)
        # A launch that shows no DevTools endpoint within 30 s (seen once in a loaded CI
        # rehearsal, not reproduced in 10 launches since) is stopped and tried once more with
        # a fresh profile; a second failure is raised with both logs' tails.
        try:
            browser_ws = self._launch(path, width, height)
        except RuntimeError as first:
            self._stop()
            try:
                browser_ws = self._launch(path, width, height)
            except RuntimeError as second:
                self._stop()
                raise RuntimeError(f"{second}\n(first attempt: {first})") from None
        port = re.search(r":(\d+)/", browser_ws).group(1)  # type: ignore[union-attr]
        page_ws = self._page_ws(int(port))
        self._ids = itertools.count(1)
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(page_ws, max_size=64 * 2**20))
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _launch(self, path: str, width: int, height: int) -> str:
        """Start Chromium with a fresh profile; its browser DevTools URL."""
        self._profile = tempfile.TemporaryDirectory(prefix="pykueue-chromium-",
                                                    ignore_cleanup_errors=True)
        # Its log goes to a file: a pipe nobody drains would block it once full.
        self._log = Path(self._profile.name) / "chromium.log"
        self.proc = subprocess.Popen(
            [path, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--ignore-certificate-errors", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self._log.open("w"),
            # Its singleton socket directory goes under TMPDIR: inside the profile, it is
            # removed with it instead of piling up in /tmp run after run.
            env={**os.environ, "TMPDIR": self._profile.name},
            start_new_session=True)  # its helpers share the group: close() stops them all
        return self._devtools_url()

    def _devtools_url(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"DevTools listening on (ws://\S+)", self._log.read_text())
            if m:
                return m.group(1)
            time.sleep(0.05)
        raise RuntimeError("Chromium did not start its DevTools endpoint (exit code "
                           f"{self.proc.poll()}): " + self._log.read_text()[-2000:])

    @staticmethod
    def _page_ws(port: int) -> str:
        import httpx

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json()
                     if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise RuntimeError("Chromium has no page")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result (events are skipped)."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def open(self, url: str) -> None:
        """Navigate (the page's scripts then run on their own)."""
        self.call("Page.navigate", url=url)

    def js(self, expression: str) -> Any:
        """The value of ``expression`` evaluated in the page."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return r.get("result", {}).get("value")

    def text(self, selector: str = "body") -> str:
        """What a person reads in ``selector`` (its innerText: hidden elements excluded)."""
        return self.js(f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText "
                       "|| ''") or ""

    def wait_text(self, needle: str, selector: str = "body", timeout: float = 20.0) -> str:
        """Wait until ``needle`` is shown in ``selector``; returns the text. Raises
        ``AssertionError`` with what was shown instead."""
        deadline = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < deadline:
            shown = self.text(selector)
            if needle in shown:
                return shown
            time.sleep(0.2)
        page = shown if selector == "body" else self.text("body")
        raise AssertionError(f"{needle!r} not shown in {selector} within {timeout}s; "
                             f"shown there: {shown[:1000]!r}; the page: {page[:3000]!r}")

    def screenshot(self, path: Path, max_height: int = 2000) -> None:
        """A PNG of the page from its top, at most ``max_height`` pixels tall."""
        size = self.js("[document.documentElement.scrollWidth, "
                       "document.documentElement.scrollHeight]")
        r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": size[0],
                            "height": min(size[1], max_height), "scale": 1})
        path.write_bytes(base64.b64decode(r["data"]))

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self._stop()

    def _stop(self) -> None:
        """Stop the browser's process group and remove its profile."""
        # Chromium's helper processes may still write into the profile after the main one
        # exits; stop the whole process group before removing it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self._profile.name, ignore_errors=True)
