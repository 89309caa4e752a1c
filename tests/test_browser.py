"""The browser client in voice_agent/web/, in a real headless Chromium.

Chromium hears a synthesized spoken question through its fake microphone (a
WAV file that it loops), talks to a real `voice-agent serve` over the real
WebSocket, and the tests read the outcome from the page's DOM and from the
WebSocket frames the page sent.

Needs Debian's `chromium` (scripts/setup installs it when run as root) and the
`playwright` Python package; no browser download. Outside CI the tests skip
when either is missing; in CI they fail instead.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import ARTIFACTS, ROOT, start_server, stop_server
from speech import silence

pytestmark = pytest.mark.e2e

# A committed recording, not a fresh synthesis: Piper varies its prosody from run
# to run, and some renditions of "France" reached Whisper as "friends" through
# Chromium's audio processing, failing about one run in two.
QUESTION = (
    ROOT / "voice_agent" / "bench" / "turns" / "bench_turns" / "close_sundays.flac"
)  # "What time do you close on Sundays?"
# Chromium loops the file: the pause must outlast the answer, or the question
# comes round again and barges in before the test has looked.
PAUSE_AFTER_QUESTION_S = 10.0
TIMEOUT_MS = 120_000  # first answer on a shared 2-core machine, models cold
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests (scripts/setup installs them)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        _unavailable("Debian's chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("browser") / "question.wav"
    question, rate = sf.read(QUESTION, dtype="float32")
    assert rate == 16000
    audio = np.concatenate([silence(0.5), question, silence(PAUSE_AFTER_QUESTION_S)])
    sf.write(path, audio, 16000, subtype="PCM_16")  # Chromium reads 16-bit PCM WAV only
    return path


def launch(playwright, chromium: str, *flags: str):
    return playwright.chromium.launch(executable_path=chromium, args=[*BROWSER_FLAGS, *flags])


def fake_microphone(wav: Path) -> list[str]:
    return [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
    ]


class Traffic:
    """What went over the page's WebSocket, as seen by the browser."""

    def __init__(self, page):
        self.sent_json: list[dict] = []
        self.sent_audio_sizes: list[int] = []
        self.received_json: list[dict] = []
        self.sockets = 0
        page.on("websocket", self._watch)

    def _watch(self, ws) -> None:
        self.sockets += 1
        ws.on("framesent", self._sent)
        ws.on(
            "framereceived",
            lambda frame: self.received_json.append(json.loads(frame)) if isinstance(frame, str) else None,
        )

    def _sent(self, frame) -> None:
        if isinstance(frame, str):
            self.sent_json.append(json.loads(frame))
        else:
            self.sent_audio_sizes.append(len(frame))

    def sent(self, kind: str) -> list[dict]:
        return [m for m in self.sent_json if m.get("type") == kind]

    def received(self, kind: str) -> list[dict]:
        return [m for m in self.received_json if m.get("type") == kind]


def test_spoken_question_gets_a_spoken_answer(server, chromium, playwright, question_wav):
    from playwright.sync_api import expect

    browser = launch(playwright, chromium, *fake_microphone(question_wav))
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        traffic = Traffic(page)

        page.goto(server + "/")
        expect(page).to_have_title("Voice Agent")
        expect(page.locator("#status")).to_have_text("Server ready")
        page.click("#start")

        # The question loops, so a repetition that is heard right is as good as the first.
        heard = page.locator(".line.user:not(.partial) .text", has_text=re.compile(r"close.*sunday", re.I))
        expect(heard.first).to_be_visible(timeout=TIMEOUT_MS)
        expect(page.locator(".line.agent .text").first).to_have_text(re.compile(r"\w{2,}"), timeout=TIMEOUT_MS)
        # Agent audio went through the playback worklet and out to the speakers.
        page.wait_for_function("Number(document.documentElement.dataset.playedMs) > 200", timeout=TIMEOUT_MS)
        expect(page.locator("#v2v")).to_have_text(re.compile(r"^\d+ ms$"))
        expect(page.locator(".turn .turn-bar span").first).to_be_visible()
        expect(page.locator("#status")).to_have_text(re.compile("Connected"))
        # The page tells the server what was heard: each mark comes back once played.
        page.wait_for_function("document.documentElement.dataset.playback === 'idle'", timeout=TIMEOUT_MS)
        page.wait_for_timeout(300)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=ARTIFACTS / "browser-conversation.png")

        page.set_viewport_size({"width": 390, "height": 844})
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        page.screenshot(path=ARTIFACTS / "browser-phone.png", full_page=True)
        page.click("#start")  # stop
        expect(page.locator("#status")).to_have_text("Not connected")
    finally:
        browser.close()

    assert overflow <= 0, f"the page is {overflow}px wider than a 390px phone screen"
    # The browser's own echo canceller is on (getUserMedia's echoCancellation), and the page says so.
    assert traffic.sent_json[0] == {"type": "start", "sample_rate": 16000, "echo_cancelled": True}
    assert len(traffic.sent_audio_sizes) > 100 and set(traffic.sent_audio_sizes) == {640}, (
        "20 ms PCM16 frames at 16 kHz"
    )
    server_marks = {m["name"] for m in traffic.received("mark")}
    echoed = [m["name"] for m in traffic.sent("mark")]
    assert echoed and set(echoed) <= server_marks, (echoed, server_marks)
    assert traffic.sent("stop"), "Stop tells the server the stream ended"
    assert not errors, f"console errors: {errors}"


def test_denied_microphone_is_explained(server, chromium, playwright):
    from playwright.sync_api import expect

    browser = launch(playwright, chromium, "--use-fake-device-for-media-stream", "--deny-permission-prompts")
    try:
        page = browser.new_page()
        traffic = Traffic(page)
        page.goto(server + "/")
        page.click("#start")
        expect(page.locator("#notice")).to_have_text(re.compile("Microphone access was denied"))
        expect(page.locator("#start")).to_have_text("Start")
        expect(page.locator("#mute")).to_be_disabled()
    finally:
        browser.close()
    assert traffic.sockets == 0, "no connection without a microphone"


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:
        pass


@pytest.fixture
def page_without_server():
    """voice_agent/web/ served by a plain static file server: no /ws, no /readyz behind it."""
    handler = functools.partial(_QuietFiles, directory=ROOT / "voice_agent" / "web")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def test_unreachable_server_is_explained(page_without_server, chromium, playwright, question_wav):
    from playwright.sync_api import expect

    browser = launch(playwright, chromium, *fake_microphone(question_wav))
    try:
        page = browser.new_page()
        page.goto(page_without_server)
        expect(page.locator("#status")).to_have_text("No voice-agent server here")
        page.click("#start")
        expect(page.locator("#notice")).to_have_text(re.compile("Cannot reach the server .* Trying again in \\d+ s"))
        expect(page.locator("#status")).to_have_text("Server unreachable")
    finally:
        browser.close()


def test_dropped_connection_reconnects(server, chromium, playwright, question_wav):
    from playwright.sync_api import expect

    browser = launch(playwright, chromium, *fake_microphone(question_wav))
    try:
        page = browser.new_page()
        traffic = Traffic(page)
        connections = []

        def route(ws) -> None:
            connections.append(ws)
            if len(connections) == 1:
                # Open, then dropped as soon as the page has said start.
                ws.on_message(lambda message: ws.close(code=1011, reason="dropped by the test"))
            else:
                ws.connect_to_server()

        page.route_web_socket(re.compile(r"/ws$"), route)
        page.goto(server + "/")
        page.click("#start")
        expect(page.locator("#notice")).to_have_text(re.compile("The connection to the server dropped"))
        # Backoff starts at half a second; then the real server takes over.
        expect(page.locator("#status")).to_have_text("Connected · listening", timeout=10_000)
        expect(page.locator("#notice")).to_be_hidden()
        expect(page.locator(".line.user:not(.partial) .text").first).to_have_text(
            re.compile(r"close.*sunday", re.I), timeout=TIMEOUT_MS
        )
    finally:
        browser.close()
    assert len(connections) == 2
    assert traffic.sent("start") and all(
        m == {"type": "start", "sample_rate": 16000, "echo_cancelled": True} for m in traffic.sent("start")
    )


def test_auth_token_goes_from_the_page_url_to_the_websocket(chromium, playwright, question_wav):
    from playwright.sync_api import expect

    process, base_url, log_file = start_server(env={"VOICE_AGENT_AUTH_TOKEN": "browser-secret"})
    browser = launch(playwright, chromium, *fake_microphone(question_wav))
    try:
        refused = browser.new_page()
        refused.goto(base_url + "/")
        refused.click("#start")
        expect(refused.locator("#notice")).to_have_text(
            re.compile(r"The server refused the connection: open this page with the right \?token=")
        )
        expect(refused.locator("#status")).to_have_text("Connection refused")

        admitted = browser.new_page()
        admitted.goto(base_url + "/?token=browser-secret")
        admitted.click("#start")
        expect(admitted.locator("#status")).to_have_text("Connected · listening")
    finally:
        browser.close()
        stop_server(process, log_file)
