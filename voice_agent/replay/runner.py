"""Replay a turn script against a running agent, as one or many sessions.

Each run is one connection that streams 20 ms frames at real-time pace for
its whole life: the turn audio when a turn is playing, digital silence
otherwise, because the agent's turn detection needs the silence to end a
turn. One task sends, one task reads; the script waits on what was read to
decide when the next turn starts. Marks are echoed once the audio before them
would have played, as a real client's player would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..protocols.events import AgentAudio, Clear, Error, Mark, Metrics, Transcript
from .echo import Echo
from .measure import (
    AudioIn,
    MessageIn,
    Received,
    dry_spells,
    first_voiced_audio,
    is_final_transcript,
    measure_turn,
    playback_intervals,
    send_time,
)
from .noise import NoiseFloor
from .script import Script, Turn
from .transport import CODECS, FRAME_S, Connection, Pacer

POLL_S = 0.01
# Over a protocol without transcripts (a phone call), an answer is over once the client played all of it
# and no more came for this long.
ANSWER_QUIET_S = 1.0


@dataclass
class Options:
    url: str
    transport: str = "native"
    token: str = ""  # the server's --auth-token, sent as a bearer token
    lead_in_ms: int = 500  # silence before the first turn
    tail_ms: int = 1000  # silence after the last answer
    reply_timeout_s: float = 30.0  # how long to wait for an answer before going on without one
    echo_seed: int | None = None  # the agent hears itself through a simulated room (echo.py); None: no echo
    echo_paths: str = "call"  # one echo path for the call, or a new one for each answer (echo.PATHS)
    echo_room: str = "small"  # echo.ROOMS
    noise_dbfs: float | None = None  # a steady noise floor under everything sent (noise.py); None: none


@dataclass
class SentTurn:
    turn: Turn
    frame_times: list[float]
    first_frame: int  # index of its first frame in everything the run sent

    @property
    def frame_samples(self) -> int:
        return int(self.turn.rate * FRAME_S)

    @property
    def sent_at(self) -> float:
        return self.frame_times[0]

    @property
    def speech_start_at(self) -> float:
        return send_time(self.frame_times, self.frame_samples, self.turn.speech.start)

    @property
    def speech_end_at(self) -> float:
        # The frame that held the last speech sample, as the server times it.
        return send_time(self.frame_times, self.frame_samples, self.turn.speech.end - 1)


@dataclass
class RunTrace:
    concurrency: int
    session: int
    repeat: int
    started_at: float = 0.0
    finished_at: float = 0.0
    turns: list[SentTurn] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # error messages from the agent
    echo_paths: list[dict] = field(default_factory=list)  # with the echo rig: each answer's way back
    failure: str | None = None  # why the run stopped early


class _Sender:
    """Streams frames at real-time pace: queued turn audio, else silence; echoes due marks."""

    def __init__(self, connection: Connection, rate: int, echo: Echo | None = None, noise: NoiseFloor | None = None):
        self.connection = connection
        self.echo = echo
        self.noise = noise
        self.frame = int(rate * FRAME_S)
        self._tape: np.ndarray | None = None
        self._position = 0
        self._times: list[float] = []
        self._done: asyncio.Future | None = None
        self.marks: list[tuple[float, str]] = []  # (due, name)
        self.stopped = False
        self.frames_sent = 0
        self._first_frame = 0

    def play(self, audio: np.ndarray) -> asyncio.Future:
        """Queue a turn; once its last frame went out, the future gets
        (the stream index of its first frame, each frame's send time)."""
        padding = -len(audio) % self.frame
        self._tape = np.concatenate([audio, np.zeros(padding, np.float32)]) if padding else audio
        self._position = 0
        self._times = []
        self._done = asyncio.get_running_loop().create_future()
        return self._done

    async def run(self) -> None:
        silence = np.zeros(self.frame, np.float32)
        codec = self.connection.codec
        pacer = Pacer()
        while not self.stopped:
            if self._tape is not None:
                if not self._position:
                    self._first_frame = self.frames_sent
                frame = self._tape[self._position : self._position + self.frame]
                self._position += self.frame
            else:
                frame = silence
            if self.echo is not None:
                # The microphone records on the schedule, as a sound card does: a frame that goes out late
                # (a busy client) holds the echo of its own 20 ms, not of the moment it was sent. Taken at the
                # send time, frames sent in a burst held the same echo, over and over, which no room makes.
                frame = np.clip(frame + self.echo.capture(pacer.due, len(frame)), -1.0, 1.0)
            if self.noise is not None:
                frame = np.clip(frame + self.noise.next(len(frame)), -1.0, 1.0)
            await self.connection.send(codec.audio(frame))
            self.frames_sent += 1
            now = time.monotonic()
            if self._tape is not None:
                self._times.append(now)
                if self._position >= len(self._tape):
                    self._tape = None
                    assert self._done is not None  # play() sets it with the tape
                    self._done.set_result((self._first_frame, self._times))
            due = [name for at, name in self.marks if at <= now]
            if due:
                self.marks = [(at, name) for at, name in self.marks if at > now]
                for name in due:
                    await self.connection.send(codec.mark_played(name))
            await pacer.tick()


class _Run:
    def __init__(self, script: Script, options: Options, trace: RunTrace, on_turn: Callable[[], None]):
        self.script = script
        self.options = options
        self.trace = trace
        self.on_turn = on_turn
        self._drains_at = 0.0  # when the client's simulated player runs dry
        self._transcripts = CODECS[options.transport].transcripts

    async def run(self) -> None:
        codec = CODECS[self.options.transport]()
        connection = await Connection.open(self.options.url, codec, self.script.rate, self.options.token)
        self.trace.started_at = time.monotonic()
        echo = None
        if self.options.echo_seed is not None:
            echo = Echo(
                self.script.rate,
                self.options.echo_seed,
                origin=self.trace.started_at,
                paths=self.options.echo_paths,
                room=self.options.echo_room,
            )
            self.trace.echo_paths = echo.paths
        noise = None if self.options.noise_dbfs is None else NoiseFloor(self.script.rate, self.options.noise_dbfs)
        sender = _Sender(connection, self.script.rate, echo, noise)
        sending = asyncio.create_task(sender.run())
        reading = asyncio.create_task(self._read(connection, sender))
        try:
            await self._play_script(sender, reading)
        finally:
            sender.stopped = True
            self.trace.finished_at = time.monotonic()
            for task in (sending, reading):
                task.cancel()
            await asyncio.gather(sending, reading, return_exceptions=True)
            await connection.close()

    async def _read(self, connection: Connection, sender: _Sender) -> None:
        received = self.trace.received
        while (item := await connection.receive()) is not None:
            at, message = item
            for event in connection.codec.receive(message):
                if isinstance(event, AgentAudio):
                    seconds = len(event.samples) / self.script.rate
                    peak = float(np.max(np.abs(event.samples))) if len(event.samples) else 0.0
                    received.append(AudioIn(at, seconds, peak))
                    self._drains_at = max(self._drains_at, at) + seconds
                    if sender.echo is not None:
                        sender.echo.played(at, event.samples)
                elif isinstance(event, Transcript):
                    received.append(
                        MessageIn(at, "transcript", {"role": event.role, "text": event.text, "final": event.final})
                    )
                elif isinstance(event, Clear):
                    received.append(MessageIn(at, "clear"))
                    self._drains_at = at
                    if sender.echo is not None:
                        sender.echo.cleared(at)
                    sender.marks = [(at, name) for _, name in sender.marks]  # dropped counts as played
                elif isinstance(event, Mark):
                    received.append(MessageIn(at, "mark", {"name": event.name}))
                    sender.marks.append((max(self._drains_at, at), event.name))
                elif isinstance(event, Metrics):
                    received.append(MessageIn(at, "metrics", dict(event.values)))
                elif isinstance(event, Error):
                    received.append(MessageIn(at, "error", {"code": event.code, "message": event.message}))
                    self.trace.errors.append(f"{event.code}: {event.message}")
        raise ConnectionError(connection.close_reason())

    async def _play_script(self, sender: _Sender, reading: asyncio.Task) -> None:
        await self._sleep_until(time.monotonic() + self.options.lead_in_ms / 1000, reading)
        previous: SentTurn | None = None
        for turn in self.script.turns:
            if previous is not None:
                await self._wait_start(turn, previous, reading)
            first_frame, frame_times = await self._watch(sender.play(turn.audio), reading)
            previous = SentTurn(turn, frame_times, first_frame)
            self.trace.turns.append(previous)
            self.on_turn()
        if previous is not None:
            last = previous
            await self._wait(lambda: self._answer_finished(last), self.options.reply_timeout_s, reading)
        await self._sleep_until(time.monotonic() + self.options.tail_ms / 1000, reading)

    async def _wait_start(self, turn: Turn, previous: SentTurn, reading: asyncio.Task) -> None:
        rule, timeout = turn.start, self.options.reply_timeout_s
        if rule.kind == "delay":
            start = previous.frame_times[-1] + rule.ms / 1000
        elif rule.kind == "barge-in":
            answered = await self._wait(lambda: self._answer_started(previous), timeout, reading)
            start = (answered or time.monotonic()) + rule.ms / 1000
        else:
            await self._wait(lambda: self._answer_finished(previous), timeout, reading)
            start = time.monotonic() + rule.ms / 1000
        await self._sleep_until(start, reading)

    def _answer_started(self, sent: SentTurn) -> float | None:
        return first_voiced_audio(self.trace.received, sent.speech_end_at)

    def _answer_finished(self, sent: SentTurn) -> float | None:
        started = self._answer_started(sent)
        if started is None:
            return None
        if not self._transcripts:
            return self._drains_at if time.monotonic() - self._drains_at >= ANSWER_QUIET_S else None
        for item in reversed(self.trace.received):
            if item.at < started:
                return None
            if is_final_transcript(item, "agent"):
                return item.at
        return None

    async def _wait(self, condition: Callable[[], float | None], timeout: float, reading: asyncio.Task) -> float | None:
        deadline = time.monotonic() + timeout
        while (value := condition()) is None and time.monotonic() < deadline:
            await self._sleep_until(time.monotonic() + POLL_S, reading)
        return value

    async def _sleep_until(self, at: float, reading: asyncio.Task) -> None:
        await self._watch(asyncio.sleep(max(0.0, at - time.monotonic())), reading)

    async def _watch(self, awaitable, reading: asyncio.Task):
        """Await ``awaitable`` unless the connection dies first (the reader then raises)."""
        waiting = asyncio.ensure_future(awaitable)
        done, _ = await asyncio.wait({waiting, reading}, return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            waiting.cancel()
            reading.result()
            raise ConnectionError("the reader stopped")
        return waiting.result()


async def run_once(
    script: Script, options: Options, concurrency: int, session: int, repeat: int, on_turn: Callable[[], None]
) -> RunTrace:
    """One connection through the whole script. Failures are recorded, not raised."""
    trace = RunTrace(concurrency, session, repeat)
    try:
        await _Run(script, options, trace, on_turn).run()
    except (ConnectionError, OSError) as exc:
        trace.failure = str(exc)
    except Exception as exc:  # noqa: BLE001 - one broken run must not end the others
        trace.failure = f"{type(exc).__name__}: {exc}"
    return trace


async def run_level(
    script: Script, options: Options, sessions: int, repeats: int, stagger_s: float, on_turn: Callable[[], None]
) -> list[RunTrace]:
    """``sessions`` concurrent slots, each running the script ``repeats`` times, started ``stagger_s`` apart."""

    async def slot(index: int) -> list[RunTrace]:
        await asyncio.sleep(index * stagger_s)
        return [await run_once(script, options, sessions, index, repeat, on_turn) for repeat in range(repeats)]

    results = await asyncio.gather(*(slot(i) for i in range(sessions)))
    return [trace for traces in results for trace in traces]


def analyse(trace: RunTrace) -> dict:
    """A run's report entry: its turns measured, times in seconds since the run started."""
    origin = trace.started_at
    turns = []
    for index, sent in enumerate(trace.turns):
        until = trace.turns[index + 1].sent_at if index + 1 < len(trace.turns) else trace.finished_at
        figures = measure_turn(
            trace.received,
            sent_at=sent.sent_at,
            speech_start_at=sent.speech_start_at,
            speech_end_at=sent.speech_end_at,
            until=until,
            expect=sent.turn.expect,
            barge_in=sent.turn.start.kind == "barge-in" and index > 0,
        )
        answer_at = figures.pop("answer_at")
        turns.append(
            {
                "index": index,
                "name": sent.turn.name,
                "start": str(sent.turn.start),
                "sent_s": _seconds(sent.sent_at, origin),
                "sent_frame": sent.first_frame,
                "speech_start_s": _seconds(sent.speech_start_at, origin),
                "speech_end_s": _seconds(sent.speech_end_at, origin),
                "answer_s": _seconds(answer_at, origin),
                **figures,
            }
        )
    return {
        "concurrency": trace.concurrency,
        "session": trace.session,
        "repeat": trace.repeat,
        "duration_s": round(trace.finished_at - trace.started_at, 3) if trace.started_at else None,
        "failure": trace.failure,
        "errors": trace.errors,
        "turns": turns,
        "agent_speech_s": [[_seconds(a, origin), _seconds(b, origin)] for a, b in playback_intervals(trace.received)],
        "dry_spells_ms": [round(gap * 1000, 1) for gap in dry_spells(trace.received)],
        "echo_paths": trace.echo_paths,
    }


def _seconds(at: float | None, origin: float) -> float | None:
    return None if at is None else round(at - origin, 3)
