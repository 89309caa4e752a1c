"""Single-speaker turns cut from recorded meetings, for the endpointing eval.

The source is a folder of recordings with an RTTM file saying who speaks when
(``../shared/audio/real/``: AMI Meeting Corpus excerpts, CC BY 4.0). A turn is
a stretch in which one speaker talks alone:

- it ends at a **speaker change**: someone else speaks next, after a silence
  or cutting in at most ``HANDOVER_S`` before the speaker stops (the cut is
  then at the other speaker's first word, so their voice is not in the turn);
  that is the turn's true end;
- a silence followed by the same speaker is a **mid-turn pause**, measured
  with the pipeline's own Silero VAD (``vad_pauses``): the RTTM's segments
  span most pauses, so it cannot say where they are;
- **overlaps are left out**: a stretch in which someone else talks over the
  speaker for longer than ``HANDOVER_S`` (a backchannel, an interjection) has
  no clean end and is dropped, and so is one that runs to the end of the
  recording (its end is unknown).

Run as a module to write the turns as a replay script (16 kHz FLAC, each file
carrying the source's attribution, and ``script.yaml``)::

    python -m voice_agent.replay.real_turns ../shared/audio/real voice_agent/bench/turns/endpoint_turns/real \\
        --extra ../shared/audio/jfk.flac

``--extra`` adds whole recordings of one speaker as turns of their own (JFK's
inaugural address excerpt, which pauses mid-sentence).
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..engines.vad import WINDOW_MS
from . import vad_pauses

RATE = 16000
# Another speaker starting this close before the speaker stops is taking the
# turn over, not talking over them.
HANDOVER_S = 0.5
MIN_SPEECH_S = 1.0  # shorter solo stretches are backchannels and one-word replies
PAD_S = 0.15  # silence kept around a turn, never into another speaker's voice
FADE_S = 0.01  # at the cuts, so that no click reads as speech
# Speech the VAD hears inside a turn where the RTTM has nobody talking, for
# longer than this, may be an unlabelled speaker: the turn is dropped.
UNLABELLED_S = 0.3

ATTRIBUTION = (
    "Derived from the AMI Meeting Corpus, (c) AMI Consortium, licensed CC BY 4.0 "
    "(https://creativecommons.org/licenses/by/4.0/); excerpts and RTTM from the "
    "pyannote/pyannote-audio repository's debug data (commit b749285). Cut into single-speaker turns."
)


@dataclass(frozen=True)
class Segment:
    speaker: str
    start: float
    end: float


@dataclass(frozen=True)
class Stretch:
    """A solo stretch of one speaker, in seconds into its recording."""

    speaker: str
    start: float
    end: float
    clean_start: bool  # False: it begins at the recording's start or as someone else stops talking over it
    audio_start: float  # what to cut: the stretch with up to PAD_S of silence either side
    audio_end: float


def read_rttm(path: Path) -> dict[str, list[Segment]]:
    """``SPEAKER <file> <channel> <start> <duration> <NA> <NA> <speaker> ...`` lines, by file."""
    segments: dict[str, list[Segment]] = defaultdict(list)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields or fields[0] != "SPEAKER":
            continue
        if len(fields) < 8:
            raise ValueError(f"{path}:{number}: an RTTM SPEAKER line needs 8 fields or more")
        start, duration = float(fields[3]), float(fields[4])
        segments[fields[1]].append(Segment(fields[7], start, start + duration))
    return {name: sorted(found, key=lambda s: s.start) for name, found in segments.items()}


def solo_stretches(segments: list[Segment], duration: float) -> list[Stretch]:
    """The stretches of one speaker talking alone that end at a speaker change."""
    edges = sorted({0.0, duration, *(s.start for s in segments), *(s.end for s in segments)})
    # Elementary intervals and who talks in each.
    pieces = []
    for a, b in zip(edges, edges[1:]):
        if b > a:
            pieces.append((a, b, frozenset(s.speaker for s in segments if s.start < b and s.end > a)))
    stretches = []
    index = 0
    while index < len(pieces):
        active = pieces[index][2]
        if len(active) != 1:
            index += 1
            continue
        [speaker] = active
        first = index
        # Go on through the speaker's own speech and silences until someone else talks.
        while index < len(pieces) and pieces[index][2] <= {speaker}:
            index += 1
        last = index - 1
        while not pieces[last][2]:  # trailing silence is not the speaker's
            last -= 1
        start, end = pieces[first][0], pieces[last][1]
        solo = sum(b - a for a, b, who in pieces[first : last + 1] if who)
        after = pieces[index] if index < len(pieces) else None
        if after is None or solo < MIN_SPEECH_S:
            continue  # runs to the end of the recording, or too short
        if speaker in after[2]:
            # Someone cut in while the speaker was talking: a handover only if the speaker stops soon after.
            goes_on = max(s.end for s in segments if s.speaker == speaker and s.start < after[1] and s.end > after[0])
            if goes_on - after[0] > HANDOVER_S:
                continue
        before = pieces[first - 1] if first > 0 else None
        clean_start = before is not None and not before[2]
        others = [s for s in segments if s.speaker != speaker]
        audio_start = max([start - PAD_S, 0.0, *(s.end for s in others if s.end <= start)])
        audio_end = min([end + PAD_S, duration, *(s.start for s in others if s.start >= end)])
        stretches.append(Stretch(speaker, start, end, clean_start, audio_start, audio_end))
    return stretches


def unlabelled_speech_s(stretch: Stretch, segments: list[Segment], speech: np.ndarray) -> float:
    """Seconds of VAD speech inside the stretch where the RTTM has the speaker silent."""
    window_s = WINDOW_MS / 1000
    seconds = 0.0
    for index in np.flatnonzero(speech):
        at = (index + 0.5) * window_s
        if stretch.start <= at < stretch.end and not any(
            s.start <= at < s.end for s in segments if s.speaker == stretch.speaker
        ):
            seconds += window_s
    return seconds


@dataclass
class Cut:
    name: str
    audio: np.ndarray
    pauses_s: list[float]
    note: str  # where it came from


def cut_recording(
    name: str, audio: np.ndarray, segments: list[Segment], threshold: float
) -> tuple[list[Cut], list[str]]:
    """The turns of one recording, and why each dropped stretch was dropped."""
    speech = vad_pauses.speech_windows(vad_pauses.probabilities(audio, RATE), threshold)
    cuts, dropped = [], []
    for number, stretch in enumerate(solo_stretches(segments, len(audio) / RATE), 1):
        where = f"{name} {stretch.speaker} {stretch.start:.2f}-{stretch.end:.2f} s"
        unlabelled = unlabelled_speech_s(stretch, segments, speech)
        if unlabelled > UNLABELLED_S:
            dropped.append(f"{where}: {unlabelled:.2f} s of speech the RTTM gives nobody")
            continue
        piece = audio[int(stretch.audio_start * RATE) : int(stretch.audio_end * RATE)].copy()
        _fade(piece)
        pauses = vad_pauses.pauses_in(vad_pauses.speech_windows(vad_pauses.probabilities(piece, RATE), threshold))
        note = f"{where}{'' if stretch.clean_start else ' (starts mid-speech)'}"
        cuts.append(Cut(f"{name}_{number:02d}", piece, [(b - a) * WINDOW_MS / 1000 for a, b in pauses], note))
    return cuts, dropped


def _fade(piece: np.ndarray) -> None:
    fade = min(int(FADE_S * RATE), len(piece) // 2)
    if fade:
        ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
        piece[:fade] *= ramp
        piece[-fade:] *= ramp[::-1]


def write_flac(path: Path, audio: np.ndarray, title: str, copyright: str) -> None:
    import soundfile

    with soundfile.SoundFile(str(path), "w", RATE, 1, subtype="PCM_16", format="FLAC") as out:
        out.title = title
        out.copyright = copyright
        out.write(audio)


def main() -> None:
    from ..config import Settings
    from .script import load_audio

    parser = argparse.ArgumentParser(prog="python -m voice_agent.replay.real_turns", description=__doc__.split("\n")[0])
    parser.add_argument("source", help="folder with the recordings and ami.rttm")
    parser.add_argument("out", help="folder to write the turns and script.yaml into")
    parser.add_argument("--rttm", default="ami.rttm", help="RTTM file in the source folder [default %(default)s]")
    parser.add_argument("--extra", nargs="*", default=[], help="whole one-speaker recordings to add as turns")
    args = parser.parse_args()
    source, out = Path(args.source), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threshold = Settings().vad_threshold
    entries, dropped = [], []
    for name, segments in sorted(read_rttm(source / args.rttm).items()):
        audio = load_audio(source / f"{name}.flac", RATE)
        cuts, why = cut_recording(name, audio, segments, threshold)
        dropped += why
        for cut in cuts:
            write_flac(out / f"{cut.name}.flac", cut.audio, cut.note, ATTRIBUTION)
            entries.append((cut, ["real", "ami", "paused" if cut.pauses_s else "whole"]))
    for extra in map(Path, args.extra):
        audio = load_audio(extra, RATE)
        found = vad_pauses.pauses_in(vad_pauses.speech_windows(vad_pauses.probabilities(audio, RATE), threshold))
        cut = Cut(extra.stem, audio, [(b - a) * WINDOW_MS / 1000 for a, b in found], f"{extra.name}, whole")
        write_flac(out / f"{cut.name}.flac", audio, cut.note, "public domain (US government work)")
        entries.append((cut, ["real", extra.stem, "paused" if cut.pauses_s else "whole"]))
    # Paused turns first, so that a --limit run still has pauses to judge.
    entries.sort(key=lambda entry: (not entry[0].pauses_s, entry[0].name))
    lines = [
        "# Real speech for the endpointing eval (scripts/endpoint_eval --group real).",
        "# Written by: python -m voice_agent.replay.real_turns; see docs/turn-taking.md and README.md here.",
        f"# {ATTRIBUTION}",
        f"# {sum(1 for c, _ in entries if c.pauses_s)} turns pause mid-turn (Silero, >= {vad_pauses.MIN_PAUSE_MS} ms);"
        f" {sum(1 for c, _ in entries if not c.pauses_s)} do not.",
        "turns:",
    ]
    for cut, tags in entries:
        pauses = ", ".join(f"{p:.2f}" for p in cut.pauses_s) or "none"
        lines += [
            f"  - file: {cut.name}.flac  # {cut.note}; {len(cut.audio) / RATE:.1f} s; pauses (s): {pauses}",
            f"    tags: [{', '.join(tags)}]",
        ]
    (out / "script.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for line in dropped:
        print(f"dropped {line}")
    total = sum(len(c.audio) for c, _ in entries) / RATE
    print(f"{len(entries)} turns, {total:.0f} s, {sum(len(c.pauses_s) for c, _ in entries)} pauses")
    print("max pause", max((p for c, _ in entries for p in c.pauses_s), default=math.nan))


if __name__ == "__main__":
    main()
