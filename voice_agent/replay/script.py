"""Turn scripts: which recordings to play, in what order, and when each starts.

A script is either a list of audio files (one per turn, all with the same
start rule) or a YAML/JSON file::

    turns:
      - file: hello.wav               # relative to the script's folder
        expect: Hello, are you open tonight?
      - file: table.flac
        start: after-reply:1500       # 1.5 s after the answer to the previous turn ended
      - file: sorry.wav
        start: barge-in:800           # 0.8 s into the answer to the previous turn

Start rules (``START_RULES``):

``after-reply[:GAP_MS]``
    once the agent's answer to the previous turn has finished playing, then
    ``GAP_MS`` of silence (the default gap if omitted);
``delay:MS``
    ``MS`` after the previous turn's audio was sent, whatever the agent does;
``barge-in:MS``
    ``MS`` after the first non-silent audio of the agent's answer to the
    previous turn arrived: the turn interrupts the agent.

Audio is read with soundfile (WAV, FLAC, OGG, ...) at any rate and channel
count, mixed down to mono and resampled to the session rate once, at load time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..audio import resample
from .measure import SpeechBounds, speech_bounds

DEFAULT_GAP_MS = 800


class ScriptError(ValueError):
    """A script or audio file that cannot be used; the message says why."""


@dataclass(frozen=True)
class StartRule:
    kind: str  # "after-reply", "delay" or "barge-in"
    ms: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.ms}"


START_RULES = ("after-reply", "delay", "barge-in")
_RULE = re.compile(r"^\s*(after-reply|delay|barge-in)\s*(?::\s*(\d+)\s*(?:ms)?)?\s*$")


def parse_start(text: str, default_gap_ms: int = DEFAULT_GAP_MS) -> StartRule:
    match = _RULE.match(text.replace("_", "-"))
    if not match:
        raise ScriptError(f"start rule {text!r}: use after-reply[:GAP_MS], delay:MS or barge-in:MS")
    kind, ms = match.group(1), match.group(2)
    if ms is None:
        if kind != "after-reply":
            raise ScriptError(f"start rule {text!r}: {kind} needs milliseconds, e.g. {kind}:800")
        return StartRule(kind, default_gap_ms)
    return StartRule(kind, int(ms))


@dataclass(frozen=True)
class Turn:
    name: str
    source: str  # the file it came from
    audio: np.ndarray  # float32 mono at the session rate
    rate: int
    start: StartRule
    speech: SpeechBounds
    expect: str | None = None
    tags: tuple[str, ...] = ()  # free labels an eval can group turns by; the replay ignores them

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.rate


@dataclass(frozen=True)
class Script:
    turns: tuple[Turn, ...]
    rate: int
    source: str  # the script file, or "" for a list of audio files


def load_audio(path: Path, rate: int) -> np.ndarray:
    import soundfile

    try:
        data, file_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises its own error types, or OSError
        raise ScriptError(f"{path}: cannot read audio: {exc}") from None
    return resample(data.mean(axis=1), file_rate, rate)


def make_turn(
    path: Path,
    rate: int,
    start: StartRule,
    expect: str | None = None,
    name: str | None = None,
    tags: tuple[str, ...] = (),
) -> Turn:
    audio = load_audio(path, rate)
    bounds = speech_bounds(audio, rate)
    if bounds is None:
        raise ScriptError(f"{path}: no speech found (the whole file is below the silence threshold)")
    return Turn(name or path.stem, str(path), audio, rate, start, bounds, expect, tags)


def from_files(paths: list[str], rate: int, start: StartRule) -> Script:
    if not paths:
        raise ScriptError("no turns: give audio files or --script")
    return Script(tuple(make_turn(Path(p), rate, start) for p in paths), rate, "")


def load_script(path: str, rate: int, default_gap_ms: int = DEFAULT_GAP_MS) -> Script:
    """Read a YAML or JSON turn script; relative audio paths are relative to it."""
    script_path = Path(path)
    try:
        text = script_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: {exc.strerror or exc}") from None
    document = _parse(text, script_path)
    turns_data = document.get("turns") if isinstance(document, dict) else document
    if not isinstance(turns_data, list) or not turns_data:
        raise ScriptError(f"{path}: needs a non-empty list of turns (a list, or a mapping with 'turns')")
    turns = []
    for number, entry in enumerate(turns_data, 1):
        where = f"{path}: turn {number}"
        if isinstance(entry, str):
            entry = {"file": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise ScriptError(f"{where}: needs a 'file'")
        unknown = set(entry) - {"file", "start", "expect", "name", "tags"}
        if unknown:
            raise ScriptError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        try:
            start = parse_start(str(entry.get("start", "after-reply")), default_gap_ms)
        except ScriptError as exc:
            raise ScriptError(f"{where}: {exc}") from None
        expect = entry.get("expect")
        if expect is not None and not isinstance(expect, str):
            raise ScriptError(f"{where}: 'expect' must be text")
        name = entry.get("name")
        tags = entry.get("tags", [])
        if isinstance(tags, str):
            tags = [tags]
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise ScriptError(f"{where}: 'tags' must be a list of words")
        turn = make_turn(
            script_path.parent / entry["file"], rate, start, expect, str(name) if name else None, tuple(tags)
        )
        turns.append(turn)
    return Script(tuple(turns), rate, str(script_path))


def _parse(text: str, path: Path):
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScriptError(f"{path}: invalid JSON: {exc}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScriptError(f"{path}: invalid YAML: {exc}") from None
