"""Echo experiment for the browser client: does the agent hear itself?

Not a test: a manual rig that needs PulseAudio (see docs/web.md, "Echo").
Chromium's microphone is the monitor of the sink it plays into, so all agent
audio comes straight back into the microphone, louder than any room would.
The question is played into that sink with paplay; an init script measures
the microphone frames the page sends while agent audio is playing.

    python tests/browser_echo_rig.py http://127.0.0.1:8000 --route element --aec on
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech import silence, speech  # noqa: E402
from test_browser import BROWSER_FLAGS  # noqa: E402

# Forces the echo canceller off for the control run, and records the level of
# every microphone frame sent while the page plays agent audio.
MEASURE = """
(() => {
  const aec = %s;
  const getUserMedia = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
  navigator.mediaDevices.getUserMedia = (c) => getUserMedia(aec ? c : { audio: { ...c.audio, echoCancellation: false } });
  window.echo = { onsets: [] };
  let was = "idle";
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    if (data instanceof ArrayBuffer) {
      const state = document.documentElement.dataset.playback;
      if (state === "playing") {
        if (was !== "playing") window.echo.onsets.push([]);
        const pcm = new Int16Array(data);
        let sum = 0;
        for (const v of pcm) sum += v * v;
        window.echo.onsets.at(-1).push(10 * Math.log10(sum / pcm.length / 2 ** 30 + 1e-12));
      }
      was = state;
    }
    return send.call(this, data);
  };
})();
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="base URL of a running voice-agent serve")
    parser.add_argument("--route", choices=("element", "context"), default="element")
    parser.add_argument("--aec", choices=("on", "off"), default="on")
    parser.add_argument("--sink", default="room", help="PulseAudio sink Chromium plays into")
    parser.add_argument("--question", default="What is the capital of France?")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to listen after the question")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "question.wav"
        sf.write(wav, np.concatenate([speech(args.question), silence(0.3)]), 16000, subtype="PCM_16")
        messages: list[dict] = []
        with sync_playwright() as p:
            # Playwright mutes Chromium by default; the rig needs its sound.
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=[*BROWSER_FLAGS, "--use-fake-ui-for-media-stream"],
                ignore_default_args=["--mute-audio"],
                env=dict(os.environ),
            )
            page = browser.new_page()
            page.add_init_script(MEASURE % ("true" if args.aec == "on" else "false"))
            page.on(
                "websocket",
                lambda ws: ws.on(
                    "framereceived", lambda f: messages.append(json.loads(f)) if isinstance(f, str) else None
                ),
            )
            page.goto(f"{args.url}/?playback={args.route}")
            page.click("#start")
            page.wait_for_function("document.getElementById('status-text').textContent.startsWith('Connected')")
            page.wait_for_timeout(1500)
            subprocess.run(["paplay", f"--device={args.sink}", str(wav)], check=True)
            page.wait_for_timeout(int(args.seconds * 1000))
            onsets = page.evaluate("window.echo.onsets")
            browser.close()

    print(f"route={args.route} aec={args.aec}")
    for index, levels in enumerate(onsets, 1):
        windows = [max(levels[i : i + 5]) for i in range(0, len(levels), 5)]  # 100 ms windows
        power = sum(10 ** (v / 10) for v in levels) / max(len(levels), 1)
        print(
            f"  playback {index}: {len(levels) * 20} ms, mic {10 * math.log10(power + 1e-12):.1f} dBFS rms;"
            f" loudest 100 ms windows of the first 800 ms: {[round(w) for w in windows[:8]]}"
        )
    for m in messages:
        if m["type"] == "clear" or (m["type"] == "transcript" and m["final"]):
            print("  ", m)
    clears = sum(m["type"] == "clear" for m in messages)
    print(f"self-interruptions (clear): {clears}")


if __name__ == "__main__":
    main()
