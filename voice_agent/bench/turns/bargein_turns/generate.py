"""Regenerate the barge-in eval turns: questions, interruptions and
acknowledgements in the embedded Piper voice, and non-speech noise bursts
made with numpy.

Run from the repository root: .venv/bin/python voice_agent/bench/turns/bargein_turns/generate.py
Writes one FLAC per sound (16 kHz mono) and script.yaml: each probe is played
over the agent's answer to the question before it, 800 ms after that answer's
first audio arrived (start rule barge-in:800). The FLAC files are committed so
that every eval replays the same sounds (Piper samples its prosody noise).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

from voice_agent.bench.speech import speech

RATE = 16000
HERE = Path(__file__).resolve().parent
PROBE_START = "barge-in:800"

# Questions whose answers run for several seconds, so each probe lands mid-answer.
QUESTIONS = {
    "q_menu": "Tell me about your menu. What do you recommend for dinner and dessert?",
    "q_directions": "How do I get to the restaurant from the train station?",
    "q_wine": "Which wines go well with fish, and which with red meat?",
    "q_history": "How did the restaurant start, and who is the chef?",
    "q_allergies": "How do you handle food allergies in the kitchen?",
}
INTERRUPTIONS = {
    "wait_question": "Wait, stop. I have a question.",
    "repeat_that": "Sorry, can you repeat that?",
    "not_what_i_asked": "No, that's not what I asked.",
    "cancel_that": "Actually, cancel that.",
    "hold_on": "Hold on, what time is it open?",
}
ACKNOWLEDGEMENTS = {
    # Piper spells "Mm-hm." out letter by letter; "Mm-hmm." comes out as a hum.
    "ack_mm_hmm": "Mm-hmm.",
    "ack_yeah": "Yeah.",
    "ack_okay": "Okay.",
    "ack_uh_huh": "Uh-huh.",
    "ack_right": "Right.",
}


def _band(noise: np.ndarray, low_hz: float, high_hz: float) -> np.ndarray:
    """Band-limit noise by zeroing FFT bins: crude, but these are test sounds, not a filter bank."""
    spectrum = np.fft.rfft(noise)
    freqs = np.fft.rfftfreq(len(noise), 1 / RATE)
    spectrum[(freqs < low_hz) | (freqs > high_hz)] = 0
    shaped = np.fft.irfft(spectrum, len(noise))
    return shaped / (np.max(np.abs(shaped)) + 1e-9)


def _decay(seconds: float, tau_s: float) -> np.ndarray:
    return np.exp(-np.arange(int(seconds * RATE)) / (tau_s * RATE))


def _place(length_s: float, *events: tuple[float, np.ndarray]) -> np.ndarray:
    out = np.zeros(int(length_s * RATE))
    for at, sound in events:
        start = int(at * RATE)
        out[start : start + len(sound)] += sound[: len(out) - start]
    return out


def door_slam(rng) -> np.ndarray:
    """A broadband crack, then a low thump ringing out over 400 ms."""
    t = np.arange(int(0.45 * RATE)) / RATE
    crack = rng.normal(0, 1, len(t)) * _decay(0.45, 0.012)
    thump = np.sin(2 * np.pi * 85 * t) * _decay(0.45, 0.09)
    return 0.8 * (0.6 * crack + 0.4 * thump)


def clicks(rng) -> np.ndarray:
    """A pen clicked six times, 100 ms apart: sharp ticks ringing for a few tens of ms."""
    click = _band(rng.normal(0, 1, int(0.05 * RATE)), 1500, 7000) * _decay(0.05, 0.015)
    return 0.6 * _place(0.6, *((i * 0.1, click) for i in range(6)))


def cough(rng) -> np.ndarray:
    """Two coughs: band-limited bursts with a sharp attack and a breathy tail."""
    burst = _band(rng.normal(0, 1, int(0.22 * RATE)), 300, 3500)
    envelope = np.minimum(1.0, np.arange(len(burst)) / (0.01 * RATE)) * _decay(0.22, 0.06)
    one = burst * envelope
    return 0.5 * _place(0.65, (0.0, one), (0.33, 0.8 * one))


def knocks(rng) -> np.ndarray:
    """Three knocks on a door, 180 ms apart."""
    t = np.arange(int(0.12 * RATE)) / RATE
    knock = (np.sin(2 * np.pi * 180 * t) + 0.5 * rng.normal(0, 1, len(t))) * _decay(0.12, 0.02)
    return 0.6 * _place(0.6, *((i * 0.18, knock) for i in range(3)))


def laugh(rng) -> np.ndarray:
    """Four voiced "ha"s with a falling pitch: a non-speech sound the VAD does take for speech."""
    length = int(0.12 * RATE)
    t = np.arange(length) / RATE
    has = []
    for index in range(4):
        sawtooth = 2 * ((t * (220 - 15 * index)) % 1.0) - 1
        voiced = _band(sawtooth, 300, 3000) * np.sin(np.pi * np.arange(length) / length)
        breath = 0.4 * _band(rng.normal(0, 1, length), 800, 5000) * _decay(0.12, 0.03)
        has.append((index * 0.2, voiced + breath))
    return 0.45 * _place(0.85, *has)


def hiss(rng, seconds: float) -> np.ndarray:
    """Broadband noise (a gust in the microphone, a passing truck), 30 ms fades."""
    noise = rng.normal(0, 0.15, int(seconds * RATE))
    fade = np.minimum(1.0, np.minimum(np.arange(len(noise)), np.arange(len(noise))[::-1]) / (0.03 * RATE))
    return np.clip(noise * fade, -1, 1)


def noises() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "noise_door_slam": door_slam(rng),
        "noise_clicks": clicks(rng),
        "noise_cough": cough(rng),
        "noise_knocks": knocks(rng),
        "noise_hiss_short": hiss(rng, 0.5),
        "noise_hiss_long": hiss(rng, 1.5),
        "noise_laugh": laugh(rng),
    }


def main() -> None:
    sounds: dict[str, tuple[np.ndarray, str | None]] = {}
    for group in (QUESTIONS, INTERRUPTIONS, ACKNOWLEDGEMENTS):
        for name, text in group.items():
            sounds[name] = (speech(text, RATE), text)
    noise_sounds = noises()
    for name, audio in noise_sounds.items():
        sounds[name] = (np.concatenate([audio, np.zeros(RATE // 10)]).astype(np.float32), None)
    for name, (audio, _) in sounds.items():
        soundfile.write(HERE / f"{name}.flac", audio, RATE, subtype="PCM_16")

    # Interleave the kinds, so that no kind always meets the same question or
    # the same point of a long session.
    probes = [
        (name, tag)
        for group in zip(INTERRUPTIONS, noise_sounds, ACKNOWLEDGEMENTS)
        for name, tag in zip(group, ("interruption", "noise", "acknowledgement"))
    ]
    probes += [(name, "noise") for name in list(noise_sounds)[len(INTERRUPTIONS) :]]
    questions = list(QUESTIONS)
    entries = []
    for index, (probe, tag) in enumerate(probes):
        question = questions[index % len(questions)]
        entries.append(f"  - file: {question}.flac\n    expect: {sounds[question][1]!r}\n    tags: [question]\n")
        expect = f"    expect: {sounds[probe][1]!r}\n" if sounds[probe][1] else ""
        entries.append(f"  - file: {probe}.flac\n    start: {PROBE_START}\n{expect}    tags: [{tag}]\n")
    header = (
        "# The barge-in eval (voice-agent bench bargein). Audio and this file: voice_agent/bench/turns/bargein_turns/generate.py.\n"
        "# Each question is followed by a probe played over the agent's answer: an interruption (must\n"
        "# stop the agent), an acknowledgement or a non-speech noise (must not).\n"
        "turns:\n"
    )
    (HERE / "script.yaml").write_text(header + "".join(entries), encoding="utf-8")


if __name__ == "__main__":
    main()
