"""Fit the end-of-turn model (voice_agent/turn_taking/turn_model.json) on labelled pauses, and check it on held-out recordings.

Pauses (Silero, as the pipeline hears them, >= 96 ms):
- AMI excerpts (../shared/audio/real, CC BY 4.0, the AMI Consortium): a pause
  inside one speaker's stretch is negative (the turn goes on), the end of a
  stretch that another speaker takes over is positive (``real_turns.solo_stretches``);
- JFK (../shared/audio/jfk.flac): its pauses negative, its end positive;
- the endpointing eval's synthetic and words groups: each file one turn.

At each pause, the features the pipeline has there (turn_model.py): Whisper
tiny.en (the embedded model) on the turn's audio up to the pause plus the
listener's 100 ms tail, the embedded LLM's end-of-turn log probability, and
prosody (prosody.py). Transcripts and log probabilities are cached in
--cache so that a rerun takes seconds. Each pause gives a row at each of
MOMENTS_MS into it that it lasts (a positive lasts: the agent would take it).

Held out by recording: AMI dev* and tst*, JFK, and every third synthetic turn
(the same in both synthetic groups). Reports on the held-out part: ROC AUC,
Brier score and reliability in 5 bins, the AUC without each input added for
the first fit's failures, and the decision against the rules
(``--turn-decision rules``), both as the server makes them with the default
settings (``turn_detection.turn_detector``: its 200 ms floor, 2 s fallback and 2 s
telling), as pauses and paused turns cut into against the wait at turn ends,
overall and per source, per cut-in cost.

    .venv/bin/python experiments/turn_model/fit.py ../shared/audio --cache /tmp/turn_model_cache [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prosody import prosody  # experiments/turn_model/prosody.py: tried, not used (it did not help)

from voice_agent.config import Settings
from voice_agent.engines.vad import WINDOW, WINDOW_MS
from voice_agent.replay import real_turns, vad_pauses
from voice_agent.replay.script import load_audio
from voice_agent.turn_taking.turn import TurnSignals
from voice_agent.turn_taking.turn_detection import turn_detector
from voice_agent.turn_taking.turn_model import FEATURES, MODEL_PATH, TurnModel, features

RATE = 16000
ROOT = Path(__file__).resolve().parents[2]
TURNS = ROOT / "voice_agent" / "bench" / "turns" / "endpoint_turns"
MOMENTS_MS = (100, 200, 300, 500, 800, 1200)
MIN_PAUSE_WINDOWS = 3  # 96 ms
TAIL = RATE // 10  # the listener's Whisper tail past the last speech window
PREROLL = RATE * 3 // 10
SMART_TURN_SILENCE = RATE // 5  # Smart Turn reads the audio 200 ms into the pause
MAX_SILENCE_MS = 2000.0  # the hard fallback, --end-silence-incomplete-ms
COSTS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0)
L2 = 1.0
# The inputs added for the failures of the first fit ("We will arrive at around 730." held 2 s);
# the report gives the held-out AUC without them and without each.
ADDED = ("final_punctuation", "ends_in_number")


@dataclass
class Pause:
    source: str  # ami, jfk, synthetic, words
    recording: str
    turn: str  # the turn (stretch) it is in
    held_out: bool
    ended: bool  # positive: someone else speaks next
    length_ms: float  # inf for a turn end
    audio: np.ndarray  # the turn's audio up to the pause, with the tail
    text: str = ""
    logprob: float | None = None
    pitch_st: float = 0.0
    energy_db: float = 0.0
    audio_probability: float | None = None  # Smart Turn's, with --smart-turn

    def signals(self, llm: bool = True) -> TurnSignals:
        return TurnSignals(self.text, end_of_turn_logprob=self.logprob if llm else None)


def _speech(audio: np.ndarray, threshold: float) -> np.ndarray:
    return vad_pauses.speech_windows(vad_pauses.probabilities(audio, RATE), threshold)


def _turn_pauses(
    source: str, recording: str, turn: str, held_out: bool, audio: np.ndarray, speech: np.ndarray, first: int, end: int
) -> list[Pause]:
    """The pauses of one turn whose speech windows are speech[first:end] (audio from sample ``first``'s window)."""
    windows = np.flatnonzero(speech[first:end]) + first
    if not len(windows):
        return []
    start = max(0, windows[0] * WINDOW - PREROLL)
    found = []
    for a, b in zip(windows, windows[1:]):
        if b - a - 1 >= MIN_PAUSE_WINDOWS:
            stop = (a + 1) * WINDOW
            piece = audio[start : stop + TAIL]
            found.append(Pause(source, recording, turn, held_out, False, (b - a - 1) * WINDOW_MS, piece))
    stop = (windows[-1] + 1) * WINDOW
    found.append(Pause(source, recording, turn, held_out, True, math.inf, audio[start : stop + TAIL]))
    return found


def collect(shared: Path, threshold: float) -> list[Pause]:
    pauses: list[Pause] = []
    real = shared / "real"
    for name, segments in sorted(real_turns.read_rttm(real / "ami.rttm").items()):
        audio = load_audio(real / f"{name}.flac", RATE)
        speech = _speech(audio, threshold)
        held_out = not name.startswith("ami_trn")
        for number, stretch in enumerate(real_turns.solo_stretches(segments, len(audio) / RATE)):
            first, end = int(stretch.start * RATE) // WINDOW, int(stretch.end * RATE) // WINDOW + 1
            pauses += _turn_pauses("ami", name, f"{name}_{number}", held_out, audio, speech, first, end)
    jfk = load_audio(shared / "jfk.flac", RATE)
    pauses += _turn_pauses("jfk", "jfk", "jfk", True, jfk, _speech(jfk, threshold), 0, len(jfk) // WINDOW)
    for group, folder in (("synthetic", TURNS), ("words", TURNS / "words")):
        files = sorted(p for p in folder.glob("*.flac"))
        names = sorted(p.stem for p in TURNS.glob("*.flac"))
        for path in files:
            audio = load_audio(path, RATE)
            held_out = names.index(path.stem) % 3 == 0 if path.stem in names else False
            speech = _speech(audio, threshold)
            pauses += _turn_pauses(group, path.stem, f"{group}_{path.stem}", held_out, audio, speech, 0, len(speech))
    return pauses


def _key(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.tobytes() if isinstance(part, np.ndarray) else str(part).encode())
    return digest.hexdigest()[:24]


def annotate(pauses: list[Pause], cache: Path, use_llm: bool, smart_turn_path: str | None) -> None:
    """Transcript, LLM log probability and prosody of each pause; the first two cached on disk."""
    cache.mkdir(parents=True, exist_ok=True)
    store = cache / "signals.json"
    known: dict = json.loads(store.read_text()) if store.exists() else {}
    stt = llm = smart_turn = None
    settings = Settings()
    for index, pause in enumerate(pauses):
        key = _key(pause.audio)
        entry = known.setdefault(key, {})
        if "text" not in entry:
            if stt is None:
                from voice_agent.engines.stt import WhisperSTT

                stt = WhisperSTT(workers=1)
            entry["text"] = stt.transcribe_blocking(pause.audio)
        pause.text = entry["text"]
        if use_llm and "logprob" not in entry:
            if llm is None:
                from voice_agent.engines.loader import create_llm

                llm = create_llm(settings)
            messages = [{"role": "system", "content": settings.system_prompt}, {"role": "user", "content": pause.text}]
            entry["logprob"] = asyncio.run(llm.end_of_turn_logprob(messages)) if pause.text.strip() else None
        pause.logprob = entry.get("logprob") if use_llm else None
        if smart_turn_path:
            if "smart_turn" not in entry:
                if smart_turn is None:
                    from voice_agent.engines.smart_turn import SmartTurn

                    smart_turn = SmartTurn(smart_turn_path)
                # As the session asks it: the turn's audio up to the moment, here 200 ms into the pause.
                heard = np.concatenate([pause.audio, np.zeros(SMART_TURN_SILENCE - TAIL, np.float32)])
                entry["smart_turn"] = smart_turn.complete_probability_blocking(heard)
            pause.audio_probability = entry["smart_turn"]
        found = prosody(pause.audio[:-TAIL])
        pause.pitch_st, pause.energy_db = found.pitch_st, found.energy_db
        if index % 20 == 0:
            store.write_text(json.dumps(known))
            print(f"{index}/{len(pauses)} {pause.turn}: {pause.text!r} {pause.logprob}", file=sys.stderr)
    store.write_text(json.dumps(known))


def rows(pauses: list[Pause], with_prosody: bool, with_audio: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One row per moment into each pause that it lasts; each row twice: with the LLM's reading and without.

    The LLM's reading may come late or not at all (another instance busy, no llama.cpp), so the model
    must decide without it too.
    """
    xs, ys = [], []
    for pause in pauses:
        for moment in MOMENTS_MS:
            if moment >= pause.length_ms:
                break
            for llm in (True, False):
                x = features(pause.signals(llm), moment)
                if with_prosody:
                    x = np.concatenate([x, [pause.pitch_st, pause.energy_db]])
                if with_audio:
                    x = np.concatenate([x, [pause.audio_probability or 0.0]])
                xs.append(x)
                ys.append(float(pause.ended))
    return np.array(xs), np.array(ys)


def fit(x: np.ndarray, y: np.ndarray, l2: float = L2) -> np.ndarray:
    """Logistic regression by Newton's method, an L2 penalty on all but the bias."""
    w = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ w))
        gradient = x.T @ (p - y) + penalty * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positives = labels == 1
    n_pos, n_neg = positives.sum(), (~positives).sum()
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def reliability(p: np.ndarray, y: np.ndarray, bins: int = 5) -> list[str]:
    edges = np.linspace(0, 1, bins + 1)
    out = []
    for a, b in zip(edges, edges[1:]):
        inside = (p >= a) & ((p < b) if b < 1 else (p <= b))
        if inside.any():
            out.append(
                f"{a:.1f}-{b:.1f}: n={inside.sum()} predicted {p[inside].mean():.2f} observed {y[inside].mean():.2f}"
            )
    return out


def decide(pauses: list[Pause], required) -> dict:
    """Pauses cut into, turns with a pause cut into, and the wait at turn ends, with ``required(pause)`` ms."""
    inside = [p for p in pauses if not p.ended]
    ends = [p for p in pauses if p.ended]
    cut = [p for p in inside if required(p) < p.length_ms]
    paused_turns = {p.turn for p in inside}
    cut_turns = {p.turn for p in cut}
    waits = np.array([min(required(p), MAX_SILENCE_MS) for p in ends])
    by_source = {}
    for source in dict.fromkeys(p.source for p in pauses):
        turns = {p.turn for p in inside if p.source == source}
        wait = np.array([min(required(p), MAX_SILENCE_MS) for p in ends if p.source == source])
        by_source[source] = (
            f"cut {len({p.turn for p in cut if p.source == source})}/{len(turns)} paused turns, "
            f"wait p50 {np.percentile(wait, 50):.0f} p90 {np.percentile(wait, 90):.0f} ms over {len(wait)} ends"
        )
    return {
        "pauses_cut": f"{len(cut)}/{len(inside)}",
        "paused_turns_cut": f"{len(cut_turns)}/{len(paused_turns)}",
        "wait_mean": round(float(waits.mean())),
        "wait_p50": round(float(np.percentile(waits, 50))),
        "wait_p90": round(float(np.percentile(waits, 90))),
        "by_source": by_source,
    }


def held_out_auc(train: list[Pause], test: list[Pause], leave_out: tuple[str, ...]) -> float:
    """The held-out AUC of a fit without the inputs ``leave_out``."""
    keep = np.array([name not in leave_out for name in FEATURES])
    x, y = rows(train, False)
    tx, ty = rows(test, False)
    w = fit(x[:, keep], y)
    return round(auc(tx[:, keep] @ w, ty), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shared", type=Path, help="the folder with real/ (AMI excerpts, ami.rttm) and jfk.flac")
    parser.add_argument("--cache", type=Path, required=True, help="folder for cached transcripts and LLM readings")
    parser.add_argument("--no-llm", action="store_true", help="leave the LLM's reading out")
    parser.add_argument("--smart-turn", help="a Smart Turn v3.2 ONNX file: also fit with its probability, to compare")
    parser.add_argument("--write", action="store_true", help=f"write the coefficients to {MODEL_PATH}")
    args = parser.parse_args()
    settings = Settings()
    pauses = collect(args.shared, settings.vad_threshold)
    annotate(pauses, args.cache, not args.no_llm, args.smart_turn)
    train = [p for p in pauses if not p.held_out]
    test = [p for p in pauses if p.held_out]
    report: dict = {"pauses": {}}
    for name, part in (("train", train), ("held out", test)):
        for source in ("ami", "jfk", "synthetic", "words"):
            chosen = [p for p in part if p.source == source]
            if chosen:
                report["pauses"][f"{name} {source}"] = (
                    f"{sum(not p.ended for p in chosen)} inside turns, {sum(p.ended for p in chosen)} turn ends"
                )
    for with_prosody in (False, True):
        x, y = rows(train, with_prosody)
        w = fit(x, y)
        tx, ty = rows(test, with_prosody)
        p = 1 / (1 + np.exp(-tx @ w))
        name = "with prosody" if with_prosody else "without prosody"
        report[name] = {
            "auc": round(auc(p, ty), 3),
            "brier": round(float(((p - ty) ** 2).mean()), 3),
            "reliability": reliability(p, ty),
            "weights": dict(zip([*FEATURES, "pitch_st", "energy_db"], np.round(w, 3).tolist())),
        }
    report["held-out AUC, inputs left out"] = {
        "none": held_out_auc(train, test, ()),
        "all the added": held_out_auc(train, test, ADDED),
        **{name: held_out_auc(train, test, (name,)) for name in ADDED},
    }
    if args.smart_turn:
        x, y = rows(train, False, True)
        tx, ty = rows(test, False, True)
        p = 1 / (1 + np.exp(-tx @ fit(x, y)))
        report["with Smart Turn"] = {
            "auc": round(auc(p, ty), 3),
            "brier": round(float(((p - ty) ** 2).mean()), 3),
            "reliability": reliability(p, ty),
        }
    w = fit(*rows(train, False))
    # The decisions as the server makes them (its floor, fallback and telling silence), each pause in a
    # session of its own: no pause habit.
    rules = turn_detector(dataclasses.replace(settings, turn_decision="rules"))
    report["held out, rules"] = decide(test, lambda p: rules.required_silence_ms(p.signals()))
    report["held out, rules, no LLM"] = decide(test, lambda p: rules.required_silence_ms(p.signals(False)))
    for group, part in (("train", train), ("held out", test)):
        for cost in COSTS:
            learned = turn_detector(dataclasses.replace(settings, turn_decision="learned", cut_in_cost=cost))
            learned.model = TurnModel(w)
            report[f"{group}, model, cut-in cost {cost}"] = decide(
                part, lambda p, d=learned: d.required_silence_ms(p.signals())
            )
            if cost == settings.cut_in_cost:
                report[f"{group}, model, cut-in cost {cost}, no LLM"] = decide(
                    part, lambda p, d=learned: d.required_silence_ms(p.signals(False))
                )
    print(json.dumps(report, indent=1))
    if args.write:
        data = {
            "features": list(FEATURES),
            "weights": np.round(w, 4).tolist(),
            "fitted_by": "experiments/turn_model/fit.py",
            "rows": int(len(rows(train, False)[1])),
        }
        MODEL_PATH.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {MODEL_PATH}", file=sys.stderr)


if __name__ == "__main__":
    main()
