"""Maintained echo cancellers side by side on the echo rig's rooms, with real speech talking over the echo.

Candidates, each fed the same two streams in 10 ms frames, in step (the output frame the client plays with the
input frame that holds its echo, as the session's queue pairs them):

- ``aec3``: WebRTC's AEC3 through ``livekit``'s AudioProcessingModule (linear filter plus residual suppressor);
- ``aec3 (webrtc-audio-processing 2)``: AEC3 through ``aec-audio-processing`` (an sdist: swig and meson
  build PulseAudio's webrtc-audio-processing 2 in about 15 minutes here);
- ``speex``: speexdsp's MDF linear echo canceller alone (``speexdsp`` on PyPI, swig over libspeexdsp), its
  filter 250 ms or 800 ms long (the latter spans the rig's longest path: 250 ms late, a 400 ms tail);
- ``speex+pre``: the same MDF (``pyaec``: aec-rs's binary wheel) with speex's preprocessor on its echo state
  (residual echo suppression and denoising);
- ``none``: the input as it came, for reference;
- a split: AEC3's output to the VAD, speex's linear output to the STT.

The call: five answers of the agent's Piper voice through one of the rig's paths (voice_agent/replay/echo.py),
a second of silence between them; over answers 3 to 5 a user talks, 0.8 s in: two excerpts of real meeting
speech (AMI, ../shared/audio/real, one speaker alone for 2 to 4 s, at the agent's level) and a Piper
interruption. Measured per canceller:

- ERLE (echo in over the canceller's output, the agent's voiced frames, echo alone): the call's first 2 s, and
  after 2 s;
- echo heard as speech: the share of Silero windows over 0.5 on the output where only the echo plays, in the
  call's first 2 s, at each answer's onset (its first 300 ms, answers 2 to 5), and elsewhere; and the words the
  STT reads from answer 2's residual where the VAD hears speech (with a 300 ms pre-roll), as a turn would;
- the user's speech in double talk: its level after the canceller against the user alone (the first 300 ms,
  where a suppressor clips, and the whole), and the STT's word error rate on the output against its reading of
  the user alone (the Piper phrase: against its text);
- CPU: ms per second of audio.

With ``--double-talk``, only where AEC3 loses the real speech's words: with the agent silent, playing without
echo, its echo 25 dB down, and the rig's echo.

    .venv/bin/pip install pyaec speexdsp aec-audio-processing   # swig, meson, libspeexdsp-dev (Debian) to build
    .venv/bin/python experiments/echo_compare.py ../shared/audio/real [--seeds 4] [--double-talk]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile
from livekit.rtc import AudioFrame, AudioProcessingModule

from voice_agent.audio import PIPELINE_RATE as RATE
from voice_agent.bench.speech import silence, speech
from voice_agent.engines.stt import WhisperSTT
from voice_agent.engines.vad import WINDOW, SileroVAD
from voice_agent.replay.echo import ROOMS, draw_path
from voice_agent.replay.measure import word_error_rate

FRAME = RATE // 100
# Speex's filter: 800 ms spans the rig's longest way back (250 ms late, a 400 ms tail) with a margin; 250 ms
# converges faster and spans the small room's.
LONG_FILTER = int(0.8 * RATE)
SHORT_FILTER = int(0.25 * RATE)
ANSWERS = [
    "Sure. The museum opens at nine in the morning and closes at six in the evening.",
    "Tickets are fifteen dollars for adults, and children under twelve get in free.",
    "The guided tour starts every hour from the main hall, and it takes about forty minutes.",
    "There is a cafe on the second floor, and the gift shop is next to the exit.",
    "Parking is free for visitors on weekends, but on weekdays it costs five dollars.",
]
INTERRUPTION = "Wait, how much is it for students?"
USER_AT_S = 0.8  # into the answer
GAP_S = 1.0
ONSET_S = 0.3


class AEC3:
    def __init__(self) -> None:
        self._apm = AudioProcessingModule(echo_cancellation=True)

    def __call__(self, played: np.ndarray, heard: np.ndarray) -> np.ndarray:
        self._apm.process_reverse_stream(AudioFrame(bytearray(played.tobytes()), RATE, 1, FRAME))
        frame = AudioFrame(bytearray(heard.tobytes()), RATE, 1, FRAME)
        self._apm.process_stream(frame)
        return np.frombuffer(frame.data, np.int16).copy()


class WebRTCAudioProcessing:
    """AEC3 again, through ``aec-audio-processing`` (swig over PulseAudio's webrtc-audio-processing 2)."""

    def __init__(self) -> None:
        from aec_audio_processing import AudioProcessor

        self._apm = AudioProcessor(enable_aec=True, enable_ns=False, enable_agc=False, enable_vad=False)
        self._apm.set_stream_format(RATE, 1)
        self._apm.set_reverse_stream_format(RATE, 1)

    def __call__(self, played: np.ndarray, heard: np.ndarray) -> np.ndarray:
        self._apm.process_reverse_stream(played.tobytes())
        return np.frombuffer(self._apm.process_stream(heard.tobytes()), np.int16).copy()


class Nothing:
    """No canceller: the input as it came."""

    def __call__(self, played: np.ndarray, heard: np.ndarray) -> np.ndarray:
        return heard


class SpeexLinear:
    def __init__(self, filter_length: int) -> None:
        from speexdsp import EchoCanceller

        self._mdf = EchoCanceller.create(FRAME, filter_length, RATE)

    def __call__(self, played: np.ndarray, heard: np.ndarray) -> np.ndarray:
        return np.frombuffer(self._mdf.process(heard.tobytes(), played.tobytes()), np.int16).copy()


class SpeexPreprocessed:
    def __init__(self, filter_length: int) -> None:
        from pyaec import Aec, lib

        self._aec = Aec(FRAME, filter_length, RATE, True)
        self._cancel = lib.AecCancelEcho

    def __call__(self, played: np.ndarray, heard: np.ndarray) -> np.ndarray:
        out = np.empty(FRAME, np.int16)
        pointer = ctypes.POINTER(ctypes.c_int16)
        self._cancel(self._aec._aec, heard.ctypes.data_as(pointer), played.ctypes.data_as(pointer),
                     out.ctypes.data_as(pointer), FRAME)  # fmt: skip
        return out


class Split:
    """AEC3's output for what tells speech from silence, speex's linear output (250 ms) for what is read."""

    def __init__(self) -> None:
        self._detect = AEC3()
        self._read = SpeexLinear(SHORT_FILTER)

    def __call__(self, played: np.ndarray, heard: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._detect(played, heard), self._read(played, heard)


Canceller = Callable[[np.ndarray, np.ndarray], np.ndarray | tuple[np.ndarray, np.ndarray]]
CANCELLERS: dict[str, Callable[[], Canceller]] = {
    "none": Nothing,
    "aec3": AEC3,
    "aec3 (webrtc-audio-processing 2)": WebRTCAudioProcessing,
    "speex 250 ms": functools.partial(SpeexLinear, SHORT_FILTER),
    "speex 800 ms": functools.partial(SpeexLinear, LONG_FILTER),
    "speex+pre 250 ms": functools.partial(SpeexPreprocessed, SHORT_FILTER),
    "speex+pre 800 ms": functools.partial(SpeexPreprocessed, LONG_FILTER),
    "split: aec3 detects, speex 250 ms read": Split,
}


def db(audio: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(audio.astype(np.float64) ** 2) + 1e-20))


def ami_excerpts(folder: Path, count: int) -> list[np.ndarray]:
    """``count`` stretches of 2 to 4 s where one speaker talks and nobody else does, spread over the files."""
    turns: dict[str, list[tuple[float, float, str]]] = {}
    for line in (folder / "ami.rttm").read_text().splitlines():
        fields = line.split()
        turns.setdefault(fields[1], []).append((float(fields[3]), float(fields[3]) + float(fields[4]), fields[7]))
    excerpts = []
    for name in sorted(turns):
        audio, rate = soundfile.read(folder / f"{name}.flac", dtype="float32")
        assert rate == RATE
        for start, end, speaker in turns[name]:
            alone = all(e <= start or s >= end for s, e, who in turns[name] if (s, e, who) != (start, end, speaker))
            if alone and end - start >= 2.0 and end <= len(audio) / RATE:
                excerpt = audio[int(start * RATE) : int(min(end, start + 4.0) * RATE)]
                excerpts.append(excerpt)
    picked = np.linspace(0, len(excerpts) - 1, count).round().astype(int)
    return [excerpts[index] for index in picked]


def at_level(audio: np.ndarray, level_db: float) -> np.ndarray:
    return (audio * 10 ** ((level_db - db(audio)) / 20)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("source", type=Path, help="folder with the AMI recordings and ami.rttm")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--double-talk", action="store_true", help="only AEC3 on the real speech, with and without echo"
    )
    args = parser.parse_args()
    stt = WhisperSTT()
    vad = SileroVAD()
    answers = [speech(text) for text in ANSWERS]
    agent_level = db(np.concatenate(answers))
    real = [at_level(excerpt, agent_level) for excerpt in ami_excerpts(args.source, 2 * args.seeds)]
    piper = speech(INTERRUPTION)
    if args.double_talk:
        double_talk(answers, real, piper, stt, args.seeds)
        return
    results: dict[str, list[dict[str, float]]] = {name: [] for name in CANCELLERS}
    cpu = dict.fromkeys(CANCELLERS, 0.0)
    seconds = 0.0
    for room_kind in ROOMS:
        for seed in range(args.seeds):
            users = [real[2 * seed], real[2 * seed + 1], piper]
            references = [stt.transcribe_blocking(user) for user in users[:2]] + [INTERRUPTION]
            call = Call(answers, users, draw_path(np.random.default_rng(seed), room_kind))
            seconds += len(call.agent) / RATE
            for name, make in CANCELLERS.items():
                started = time.process_time()
                detected, read = call.through(make())
                cpu[name] += time.process_time() - started
                row = call.measure(detected, read, vad, stt, references)
                row["room"] = ROOMS.index(room_kind)
                results[name].append(row)
                print(room_kind, seed, name, {k: round(v, 2) for k, v in row.items()}, flush=True)
    report(results, cpu, seconds)


def double_talk(answers: list[np.ndarray], real: list[np.ndarray], piper: np.ndarray, stt: WhisperSTT, seeds: int):
    """Where AEC3 loses a real user's words: the WER on its output with the agent silent, with the agent
    playing and no way back into the microphone, with its echo 25 dB down, and with the rig's echo (small room)."""
    references = [stt.transcribe_blocking(user) for user in real]
    print("| input to AEC3 | WER real speech |")
    print("|---|---:|")
    for condition in ("the agent silent", "the agent playing, no echo", "its echo at -25 dB", "the rig's echo"):
        errors = []
        for seed in range(seeds):
            path = draw_path(np.random.default_rng(seed), "small")
            call = Call(answers, [real[2 * seed], real[2 * seed + 1], piper], path)
            if condition == "the agent silent":
                call.agent = np.zeros_like(call.agent)
                call.heard = call.user.copy()
            elif condition == "the agent playing, no echo":
                call.heard = call.user.copy()
            elif condition == "its echo at -25 dB":
                call.heard = call.user + call.echo * np.float32(10 ** ((-25 - path.gain_db) / 20))
            _, read = call.through(AEC3())
            for index, (begin, end) in enumerate(call.user_spans[:2]):
                heard = stt.transcribe_blocking(read[begin - RATE // 5 : end + RATE // 5])
                errors.append(word_error_rate(references[2 * seed + index], heard))
        print(f"| {condition} | {np.mean(errors):.2f} |", flush=True)


class Call:
    """Five answers through one path, a user over the last three."""

    def __init__(self, answers: list[np.ndarray], users: list[np.ndarray], path) -> None:
        parts, self.answer_spans, self.user_spans = [], [], []
        at = 0
        for answer in answers:
            self.answer_spans.append((at, at + len(answer)))
            parts += [answer, silence(GAP_S)]
            at += len(answer) + int(GAP_S * RATE)
        self.agent = np.concatenate(parts)
        delay = int(path.delay_ms * RATE / 1000)
        self.echo = np.concatenate([np.zeros(delay), np.convolve(self.agent, path.room_response(RATE))])
        self.echo = self.echo[: len(self.agent)].astype(np.float32)
        self.user = np.zeros_like(self.agent)
        for user, (start, _) in zip(users, self.answer_spans[2:], strict=True):
            begin = start + int(USER_AT_S * RATE)
            self.user[begin : begin + len(user)] = user
            self.user_spans.append((begin, begin + len(user)))
        self.users = users
        self.heard = self.echo + self.user

    def through(self, canceller: Canceller) -> tuple[np.ndarray, np.ndarray]:
        """The output the VAD takes speech from, and the output the STT reads (the same but for a split)."""
        played, heard = pcm(self.agent), pcm(self.heard)
        detected, read = np.zeros(len(heard), np.int16), np.zeros(len(heard), np.int16)
        for start in range(0, len(heard) - FRAME + 1, FRAME):
            out = canceller(played[start : start + FRAME], heard[start : start + FRAME])
            detected[start : start + FRAME], read[start : start + FRAME] = out if isinstance(out, tuple) else (out, out)
        return detected.astype(np.float32) / 32768.0, read.astype(np.float32) / 32768.0

    def measure(
        self, cleaned: np.ndarray, read: np.ndarray, vad: SileroVAD, stt: WhisperSTT, references: list[str]
    ) -> dict:
        alone = np.ones(len(cleaned), bool)  # echo alone: no user
        for begin, end in self.user_spans:
            alone[begin - RATE // 10 : end + RATE // 2] = False
        voiced = alone & (np.abs(self.agent) > 0.01)
        voiced = np.repeat(voiced[::FRAME], FRAME)[: len(cleaned)]
        first = np.zeros(len(cleaned), bool)
        first[: 2 * RATE] = True
        row = {
            "erle_first": db(self.echo[voiced & first]) - db(cleaned[voiced & first]),
            "erle_after": db(self.echo[voiced & ~first]) - db(cleaned[voiced & ~first]),
        }
        probabilities = np.repeat(np.array(vad.stream().process(cleaned)) > 0.5, WINDOW)
        speechy = np.zeros(len(cleaned), bool)
        speechy[: len(probabilities)] = probabilities
        onset = np.zeros(len(cleaned), bool)
        for begin, _ in self.answer_spans[1:]:
            onset[begin : begin + int(ONSET_S * RATE)] = True
        echo_on = alone & (np.abs(self.echo) > 1e-4)
        row["vad_first"] = float(np.mean(speechy[echo_on & first]))
        row["vad_onset"] = float(np.mean(speechy[echo_on & onset]))
        row["vad_rest"] = float(np.mean(speechy[echo_on & ~first & ~onset]))
        begin, end = self.answer_spans[1]
        # What a turn would read: the output the STT takes, where the VAD hears speech (and a pre-roll before).
        preroll = np.convolve(speechy, np.ones(int(ONSET_S * RATE)), "full")[: len(speechy)] > 0
        echo_read = (read * preroll)[begin : end + RATE // 2]
        row["echo_words"] = len(stt.transcribe_blocking(echo_read).split()) if echo_read.any() else 0
        for index, ((begin, end), user, reference) in enumerate(
            zip(self.user_spans, self.users, references, strict=True)
        ):
            onset_end = begin + int(ONSET_S * RATE)
            row[f"user{index}_onset_db"] = db(read[begin:onset_end]) - db(user[: onset_end - begin])
            row[f"user{index}_db"] = db(read[begin:end]) - db(user)
            heard = stt.transcribe_blocking(read[begin - RATE // 5 : end + RATE // 5])
            row[f"user{index}_wer"] = word_error_rate(reference, heard)
        return row


def pcm(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def report(results: dict[str, list[dict[str, float]]], cpu: dict[str, float], seconds: float) -> None:
    print("| canceller | room | ERLE 0-2 s dB | ERLE after dB | echo as speech: first 2 s / answer onsets / rest "
          "| STT words from answer 2's echo | user's first 300 ms dB | user dB | WER real speech | WER Piper "
          "| CPU ms per s |")  # fmt: skip
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        for room_index, room_kind in enumerate(ROOMS):
            mine = [row for row in rows if row["room"] == room_index]

            def median(key: str, rows: list[dict[str, float]] = mine) -> float:
                return float(np.median([row[key] for row in rows]))

            def mean(keys: list[str], rows: list[dict[str, float]] = mine) -> float:
                return float(np.mean([row[key] for row in rows for key in keys]))

            print(
                f"| {name} | {room_kind} | {median('erle_first'):.1f} | {median('erle_after'):.1f} "
                f"| {mean(['vad_first']):.0%} / {mean(['vad_onset']):.0%} / {mean(['vad_rest']):.0%} "
                f"| {mean(['echo_words']):.1f} "
                f"| {mean([f'user{i}_onset_db' for i in range(3)]):+.1f} | {mean([f'user{i}_db' for i in range(3)]):+.1f} "
                f"| {mean(['user0_wer', 'user1_wer']):.2f} | {mean(['user2_wer']):.2f} "
                f"| {cpu[name] / seconds * 1000:.1f} |"
            )


if __name__ == "__main__":
    main()
