"""The HTML report as a browser shows it: headless chromium opens the page of a real
(synthetic, written through the trace writer) run, screenshots every plot and checks that
each one was decoded and drawn (not blank).

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages ending in NUL, commands on the browser's fd 3, replies on its fd 4), so no port
and no client library. Without a browser the test skips and says why; under ``CI=true`` it
fails instead, so CI never passes without looking at the page.
"""

import base64
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from synthetic import write_run

import ailens

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)
WIDTH = 1280  # CSS px at device scale 1: one screenshot pixel per CSS pixel
INK = 0.1  # a pixel is drawn when a channel is this far (of 1) from white
TIMEOUT = 30  # s for the whole browser session
# Chromium finds the DevTools pipe on fds 3 and 4: put the two pipe ends there (through
# copies, in case one already sits on 3 or 4; dup2 onto itself keeps close-on-exec), exec it.
_ON_FDS_3_4 = (
    "import os, sys; r, w = os.dup(int(sys.argv[1])), os.dup(int(sys.argv[2])); "
    "os.dup2(r, 3); os.dup2(w, 4); os.set_inheritable(3, True); os.set_inheritable(4, True); "
    "os.execv(sys.argv[3], sys.argv[3:])"
)


def find_browser() -> str:
    """The chromium to use; skips (fails under CI=true) when there is none."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    reason = (
        "no headless browser (chromium) on PATH: the HTML report was not rendered; "
        "install it with `scripts/setup --browser` (Debian's chromium, as root)"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


class Browser:
    """Headless chromium over a DevTools pipe; every read has a deadline."""

    def __init__(self, exe: str, profile: Path, log: Path, timeout: float = TIMEOUT):
        self.deadline = time.monotonic() + timeout
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        self._log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ON_FDS_3_4, str(cmd_r), str(out_w), exe, *FLAGS]
            + [f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(cmd_r, out_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            start_new_session=True,  # its helper processes die with it (killpg below)
        )
        os.close(cmd_r)
        os.close(out_w)
        self._buf = b""
        self._id = 0
        self._events: list[dict] = []  # arrived while waiting for a reply

    def _recv(self) -> dict:
        while b"\0" not in self._buf:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self._out_r], [], [], left)[0]:
                raise TimeoutError(f"browser did not answer in time; log: {self.log_tail()}")
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"browser exited; log: {self.log_tail()}")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command and return its result (events arriving meanwhile are kept)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._recv()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            if "method" in reply:
                self._events.append(reply)

    def wait_event(self, method: str, session: str) -> dict:
        """The next event ``method`` of tab ``session``."""
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._recv())

    def open(self, url: str, height: int = 1000) -> str:
        """A new tab showing ``url`` at WIDTH x height CSS px, device scale 1; its session."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=WIDTH,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.enable", session)
        self.call("Page.navigate", session, url=url)
        self.wait_event("Page.loadEventFired", session)
        return session

    def log_tail(self) -> str:
        return self._log.read_text(errors="replace")[-2000:]

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - already gone or hung: killed below either way
            pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            os.close(self._cmd_w)
            os.close(self._out_r)


# Once the page has loaded: every <img>, whether the browser decoded it, and where it sits.
_IMAGES_JS = """(async () => {
  if (document.readyState !== "complete")
    await new Promise(done => addEventListener("load", done));
  const imgs = [...document.images];
  const decoded = await Promise.all(imgs.map(i => i.decode().then(() => true, () => false)));
  return {url: location.href, images: imgs.map((i, k) => {
    const r = i.getBoundingClientRect();
    return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height,
            natural: [i.naturalWidth, i.naturalHeight], decoded: decoded[k],
            src: i.getAttribute("src")};
  })};
})()"""


def ink(rgb: np.ndarray) -> float:
    """Fraction of drawn (not near-white) pixels of an image (alpha composited on white)."""
    rgb = np.asarray(rgb, dtype=float)
    if rgb.max() > 1:
        rgb = rgb / 255
    if rgb.shape[-1] == 4:
        rgb = rgb[..., :3] * rgb[..., 3:] + (1 - rgb[..., 3:])
    return float(((1 - rgb[..., :3]).max(axis=-1) > INK).mean())


def read_png(data: bytes) -> np.ndarray:
    from matplotlib.image import imread

    return imread(io.BytesIO(data), format="png")


def plot_problems(browser: Browser, page: Path, shots: Path) -> tuple[int, list[str]]:
    """Open ``page``, screenshot each <img> where it sits; (number of images, problems).

    A plot is fine when the browser decoded it, it is laid out at its natural size (or
    scaled down to the column width), and its screenshot has ink: at least 1% of pixels
    drawn and at least half the share its own PNG has.
    """
    session = browser.open(page.as_uri())
    shown = browser.call(
        "Runtime.evaluate", session, expression=_IMAGES_JS, awaitPromise=True, returnByValue=True
    )["result"]["value"]
    assert shown["url"] == page.as_uri(), shown["url"]
    images = shown["images"]
    problems = []
    for k, img in enumerate(images):
        name = f"image {k} of {page.name}"
        if not img["decoded"] or not img["natural"][0]:
            problems.append(f"{name}: the browser could not decode it")
            continue
        nat_w, nat_h = img["natural"]
        if not (0.5 * nat_w <= img["width"] <= nat_w + 1 and img["height"] >= 0.5 * nat_h):
            problems.append(
                f"{name}: laid out at {img['width']}x{img['height']}, png {nat_w}x{nat_h}"
            )
            continue
        clip = {k2: img[k2] for k2 in ("x", "y", "width", "height")} | {"scale": 1}
        shot = browser.call(
            "Page.captureScreenshot", session, format="png", clip=clip, captureBeyondViewport=True
        )
        data = base64.b64decode(shot["data"])
        (shots / f"{page.stem}-{k}.png").write_bytes(data)
        seen = ink(read_png(data))
        own = ink(read_png(base64.b64decode(img["src"].split(",", 1)[1])))
        if seen < 0.01 or seen < 0.5 * own:
            problems.append(f"{name}: blank on screen ({seen:.1%} ink, its PNG has {own:.1%})")
    return len(images), problems


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    pytest.importorskip("matplotlib")
    from ailens import analyze
    from ailens.predict.whatif import whatif
    from ailens.report.html import render_html
    from ailens.report.rows import default_whatif_ranks

    d = tmp_path_factory.mktemp("html")
    s = write_run(d / "run", ranks=4, steps=60, seed=1)
    a = analyze(ailens.load_run(s.path))
    rows = whatif(a, default_whatif_ranks(a.ranks))
    out = d / "report.html"
    out.write_text(render_html(a, rows), encoding="utf-8")
    return out


def _white_png(width: int, height: int) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    plt.imsave(buf, np.ones((height, width, 3)), format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


@pytest.mark.timeout(60)
def test_browser_draws_every_plot_of_the_report(page, tmp_path):
    exe = find_browser()
    html = page.read_text(encoding="utf-8")
    uris = re.findall(r'src="(data:image/png;base64,[^"]+)"', html)
    assert len(uris) >= 5  # SIMO, share, comm/compute, forecast, scaling
    # The control page: the same report with its first plot blank and its second broken.
    w, h = read_png(base64.b64decode(uris[0].split(",", 1)[1])).shape[1::-1]
    broken = "data:image/png;base64," + base64.b64encode(b"\x89PNG not a plot").decode()
    control = tmp_path / "control.html"
    control.write_text(
        html.replace(uris[0], _white_png(w, h)).replace(uris[1], broken), encoding="utf-8"
    )
    shots = tmp_path / "shots"
    shots.mkdir()
    browser = Browser(exe, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        n, problems = plot_problems(browser, page, shots)
        n_control, control_problems = plot_problems(browser, control, shots)
    finally:
        browser.close()
    assert n == len(uris), (n, len(uris))
    assert problems == [], f"{problems} (screenshots in {shots})"
    # The check sees what a reader would: a blank plot and an undecodable one are caught.
    assert n_control == n
    assert len(control_problems) == 2, control_problems
    assert "image 0 of control.html: blank" in control_problems[0]
    assert "image 1 of control.html: the browser could not decode" in control_problems[1]


def test_without_a_browser_ci_fails_and_others_skip(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: no headless browser"):
        find_browser()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="scripts/setup --browser"):
        find_browser()
