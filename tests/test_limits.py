"""Per-client limits and session admission: unit tests with a fake clock, then a real server."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from tests.conftest import start_server, stop_server
from tests.speech import silence, speech
from tests.wsclient import NativeClient
from voice_agent.audio import float_to_pcm16
from voice_agent.config import Settings
from voice_agent.server.limits import AddressBudgets, ClientLimits, Deadlines, RateLimit, Refused, SessionRegistry


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_limit_allows_the_burst_then_the_rate():
    clock = FakeClock()
    limit = RateLimit(rate=2.0, burst=4.0, clock=clock)
    assert [limit.take(1) for _ in range(5)] == [True, True, True, True, False]
    clock.now += 0.5  # one unit back
    assert limit.take(1) and not limit.take(1)
    clock.now += 100  # refills to the burst, no further
    assert limit.take(4) and not limit.take(0.5)


def test_a_refused_take_spends_nothing():
    limit = RateLimit(rate=1.0, burst=3.0, clock=FakeClock())
    assert not limit.take(5)
    assert limit.take(3)


def test_rate_zero_is_no_limit():
    limit = RateLimit(rate=0, burst=0, clock=FakeClock())
    assert all(limit.take(1e9) for _ in range(100))


def test_idle_timeout_restarts_with_each_message():
    clock = FakeClock()
    deadlines = Deadlines(idle_s=10, max_s=0, clock=clock)
    clock.now += 9
    assert deadlines.expired() is None and deadlines.remaining() == pytest.approx(1)
    deadlines.touch()
    clock.now += 9
    assert deadlines.expired() is None
    clock.now += 1
    assert deadlines.expired() == Deadlines.IDLE and deadlines.remaining() == 0


def test_session_length_is_capped_however_busy_the_client():
    clock = FakeClock()
    deadlines = Deadlines(idle_s=10, max_s=30, clock=clock)
    for _ in range(29):
        clock.now += 1
        deadlines.touch()
        assert deadlines.expired() is None
    assert deadlines.remaining() == pytest.approx(1)
    clock.now += 1
    assert deadlines.expired() == Deadlines.TOO_LONG


def test_no_deadlines_when_both_are_off():
    clock = FakeClock()
    deadlines = Deadlines(idle_s=0, max_s=0, clock=clock)
    clock.now += 1e6
    assert deadlines.expired() is None and deadlines.remaining() is None


def test_before_the_first_turn_the_idle_limit_is_shorter():
    clock = FakeClock()
    deadlines = Deadlines(idle_s=60, max_s=0, first_turn_s=30, clock=clock)
    clock.now += 29
    assert deadlines.expired() is None and deadlines.remaining() == pytest.approx(1)
    clock.now += 1
    assert deadlines.expired() == Deadlines.IDLE
    deadlines.touch()  # the user spoke: the idle timeout applies from now on
    clock.now += 59
    assert deadlines.expired() is None
    clock.now += 1
    assert deadlines.expired() == Deadlines.IDLE
    assert Deadlines(idle_s=5, max_s=0, first_turn_s=30, clock=clock).remaining() == pytest.approx(5)  # the shorter
    clock.now += 1e6
    assert Deadlines(idle_s=0, max_s=0, first_turn_s=0, clock=clock).remaining() is None


def test_the_agent_being_busy_postpones_idleness_but_is_not_a_first_turn():
    clock = FakeClock()
    deadlines = Deadlines(idle_s=60, max_s=0, first_turn_s=30, clock=clock)
    clock.now += 20
    deadlines.busy()  # a greeting, say
    clock.now += 29
    assert deadlines.expired() is None
    clock.now += 1
    assert deadlines.expired() == Deadlines.IDLE  # 30 s after it, not 60


def test_handshakes_are_budgeted_per_address_with_a_burst():
    clock = FakeClock()
    budgets = AddressBudgets(Settings(max_connections_per_s=5), clock)
    assert [budgets.admit_handshake("10.0.0.1") for _ in range(21)] == [True] * 20 + [False]
    assert budgets.admit_handshake("10.0.0.2")  # another address has its own
    clock.now += 0.2
    assert budgets.admit_handshake("10.0.0.1") and not budgets.admit_handshake("10.0.0.1")
    unlimited = AddressBudgets(Settings(max_connections_per_s=0), clock)
    assert all(unlimited.admit_handshake("10.0.0.1") for _ in range(1000))


def test_an_address_has_one_byte_budget_whatever_its_connections():
    clock = FakeClock()
    budgets = AddressBudgets(Settings(max_bytes_per_s=1000), clock)  # 2000 bytes of burst
    first = ClientLimits(Settings(), clock, data=budgets.bytes_of("10.0.0.1"))
    assert first.data.take(1500)
    again = ClientLimits(Settings(), clock, data=budgets.bytes_of("10.0.0.1"))  # a reconnect: no fresh burst
    assert not again.data.take(1000) and again.data.take(500)
    assert budgets.bytes_of("10.0.0.2").take(2000)


def test_only_the_most_recent_addresses_are_remembered():
    clock = FakeClock()
    budgets = AddressBudgets(Settings(max_connections_per_s=1), clock, tracked=2)  # a burst of 4
    for _ in range(4):
        budgets.admit_handshake("a")
    assert not budgets.admit_handshake("a")
    budgets.admit_handshake("b")
    assert not budgets.admit_handshake("a")  # seen again: the most recent now
    budgets.admit_handshake("c")  # "b" is forgotten, "a" kept
    assert not budgets.admit_handshake("a")
    budgets.admit_handshake("d")
    budgets.admit_handshake("e")  # now "a" is forgotten: it starts afresh
    assert budgets.admit_handshake("a")


def test_audio_over_the_rate_is_dropped_and_reported_once_per_run():
    clock = FakeClock()
    limits = ClientLimits(Settings(max_audio_rate=1.5), clock)  # 4.5 s burst
    admitted = [limits.admit_audio(0.5) for _ in range(12)]  # 6 s of audio at once
    assert admitted == [True] * 9 + [False] * 3
    reports = []
    limits = ClientLimits(Settings(max_audio_rate=1.5), clock)
    for _ in range(12):
        limits.admit_audio(0.5)
        reports.append(limits.report_drop)
    assert reports == [False] * 9 + [True, False, False]
    clock.now += 10  # the client slowed down: a later flood is reported again
    assert limits.admit_audio(0.5) and not limits.report_drop
    assert all(limits.admit_audio(0.5) for _ in range(8))  # the rest of the 4.5 s burst
    assert not limits.admit_audio(0.5) and limits.report_drop


def test_real_time_audio_is_never_dropped():
    clock = FakeClock()
    limits = ClientLimits(Settings(max_audio_rate=1.5), clock)
    for _ in range(50 * 600):  # ten minutes of 20 ms frames, each arriving 20 ms after the last
        clock.now += 0.02
        assert limits.admit_audio(0.02)


def test_bytes_over_the_budget_are_refused():
    clock = FakeClock()
    limits = ClientLimits(Settings(max_bytes_per_s=1000), clock)  # 2000 bytes of burst
    assert limits.data.take(1500) and not limits.data.take(1000)
    clock.now += 1
    assert limits.data.take(1000)
    assert ClientLimits(Settings(max_bytes_per_s=0), clock).data.take(10**9)


def test_text_turns_are_limited_to_about_one_a_second():
    clock = FakeClock()
    limits = ClientLimits(Settings(), clock)
    assert [limits.texts.take(1) for _ in range(4)] == [True, True, False, False]
    clock.now += 1
    assert limits.texts.take(1) and not limits.texts.take(1)


def test_sessions_from_one_address_are_limited_beside_the_global_maximum():
    registry = SessionRegistry(maximum=5, per_address=2)
    a1, a2 = registry.open("10.0.0.1"), registry.open("10.0.0.1")
    with pytest.raises(Refused) as refused:
        registry.open("10.0.0.1")
    assert refused.value.kind == "address_full"
    others = [registry.open("10.0.0.2"), registry.open("10.0.0.2"), registry.open("10.0.0.3")]
    with pytest.raises(Refused) as refused:
        registry.open("10.0.0.4")
    assert refused.value.kind == "full"
    a1.release()
    a1.release()  # twice is harmless, and does not free a second slot of the address
    registry.open("10.0.0.1")
    with pytest.raises(Refused):
        registry.open("10.0.0.1")
    for slot in [a2, *others]:
        slot.release()
    assert registry.active == 1
    calls = [registry.open(None) for _ in range(4)]  # phone calls: no address limit, only the maximum
    with pytest.raises(Refused) as refused:
        registry.open(None)
    assert refused.value.kind == "full" and len(calls) == 4


def test_telephony_streams_count_per_address_and_per_token():
    registry = SessionRegistry(maximum=10, per_address=2, per_token=3)
    a = [registry.open("10.0.0.1", "t1"), registry.open("10.0.0.1", "t1")]
    with pytest.raises(Refused) as refused:
        registry.open("10.0.0.1", "t1")  # the address's limit holds for phone streams too
    assert refused.value.kind == "address_full"
    b = registry.open(None, "t1")  # a call Twilio signed for: its token counts, not its address
    with pytest.raises(Refused) as refused:
        registry.open("10.0.0.2", "t1")
    assert refused.value.kind == "token_full"
    other = registry.open("10.0.0.2", "t2")  # another token has its own share
    b.release()
    registry.open("10.0.0.2", "t1").release()
    for slot in [*a, other]:
        slot.release()
    assert registry.active == 0 and not registry._by_token and not registry._by_address


class FakeSession:
    def __init__(self, registry: SessionRegistry, answering_for: float = 0.0):
        self.slot = registry.open()
        self.slot.answering = lambda: time.monotonic() < self.until
        self.until = time.monotonic() + answering_for

    async def serve(self) -> None:
        """What the connection does: wait for a close request, then release the slot."""
        await self.slot.close_requested.wait()
        self.slot.release()


def test_sessions_past_the_maximum_are_refused_until_one_leaves():
    registry = SessionRegistry(maximum=2)
    first, second = registry.open(), registry.open()
    with pytest.raises(Refused) as refused:
        registry.open()
    assert refused.value.kind == "full" and str(refused.value) == "server is full"
    first.release()
    first.release()  # twice is harmless
    with registry.open():
        assert registry.active == 2
    assert registry.active == 1
    second.release()
    assert registry.active == 0


def test_no_maximum_when_zero():
    registry = SessionRegistry(maximum=0)
    slots = [registry.open() for _ in range(1000)]
    assert registry.active == len(slots)


async def test_drain_closes_idle_sessions_at_once_and_answering_ones_when_done():
    registry = SessionRegistry(maximum=0)
    idle, busy = FakeSession(registry), FakeSession(registry, answering_for=0.5)
    serving = [asyncio.create_task(s.serve()) for s in (idle, busy)]
    started = time.monotonic()
    draining = asyncio.create_task(registry.drain(grace_s=5.0, poll_s=0.01))
    await asyncio.sleep(0.1)
    assert idle.slot.close_requested.is_set() and not busy.slot.close_requested.is_set()
    assert (idle.slot.close_code, idle.slot.close_reason) == (1001, "server is shutting down")
    with pytest.raises(Refused) as refused:
        registry.open()
    assert refused.value.kind == "shutting_down"
    await draining
    assert 0.5 <= time.monotonic() - started < 1.0
    assert busy.slot.close_code == 1001 and registry.active == 0
    await asyncio.gather(*serving)


async def test_drain_closes_every_session_when_the_grace_period_ends():
    registry = SessionRegistry(maximum=0)
    busy = FakeSession(registry, answering_for=60)
    serving = asyncio.create_task(busy.serve())
    started = time.monotonic()
    await registry.drain(grace_s=0.3, poll_s=0.01)
    assert 0.3 <= time.monotonic() - started < 0.6
    assert busy.slot.close_code == 1001
    await serving


async def test_drain_gives_up_on_a_connection_that_never_closes():
    registry = SessionRegistry(maximum=0)
    registry.open()  # never released
    started = time.monotonic()
    await registry.drain(grace_s=0.1, poll_s=0.01, linger_s=0.2)
    assert time.monotonic() - started < 0.5


# A real server with small limits.

IDLE_S = 5.0
MAX_SESSION_S = 20.0
MAX_SESSIONS = 3


@pytest.fixture(scope="module")
def limited_url():
    process, base_url, log_file = start_server(
        "--max-sessions", str(MAX_SESSIONS),
        "--idle-timeout-s", str(IDLE_S),
        "--max-session-s", str(MAX_SESSION_S),
        "--llm-max-tokens", "30",
    )  # fmt: skip
    yield base_url.replace("http://", "ws://") + "/ws"
    stop_server(process, log_file)


async def closed_with(client: NativeClient, timeout: float = 10.0) -> tuple[int, str]:
    await asyncio.wait_for(client._reader, timeout)
    return client.ws.close_code, client.ws.close_reason


async def wait_until_admitted(url: str, timeout: float = 5.0) -> NativeClient:
    """A new session, once the server has let go of one just closed."""
    deadline = time.monotonic() + timeout
    while True:
        client = await NativeClient.connect(url, rate=None)  # no first message: a refusal is read, not raised
        await asyncio.sleep(0.2)
        if client.ws.close_code is None:
            return client
        if time.monotonic() > deadline:
            raise AssertionError(f"never admitted: {client.ws.close_code} {client.ws.close_reason}")


@pytest.mark.e2e
async def test_sessions_past_the_maximum_are_refused_with_1013(limited_url):
    clients = [await NativeClient.connect(limited_url) for _ in range(MAX_SESSIONS)]
    try:
        # No first message: the server may close before a send could go out.
        refused = await NativeClient.connect(limited_url, rate=None)
        assert await closed_with(refused) == (1013, "server is full")
        await clients[0].close()
        clients[0] = await wait_until_admitted(limited_url)
    finally:  # a leaked session would fill the server for the next tests
        for client in clients:
            await client.close()


@pytest.mark.e2e
async def test_an_idle_session_is_told_and_closed(limited_url):
    client = await NativeClient.connect(limited_url)
    started = time.monotonic()
    code, reason = await closed_with(client, IDLE_S + 10)
    assert (code, reason) == (1000, "idle timeout")
    assert IDLE_S - 0.5 <= time.monotonic() - started
    assert [m["code"] for m in client.json("error")] == ["idle_timeout"]


@pytest.mark.e2e
async def test_marks_do_not_keep_a_session_alive(limited_url):
    client = await NativeClient.connect(limited_url)
    started = time.monotonic()

    async def echo_marks() -> None:
        while True:
            await client.ws.send(json.dumps({"type": "mark", "name": "1.0"}))
            await asyncio.sleep(0.5)

    marks = asyncio.create_task(echo_marks())
    code, reason = await closed_with(client, IDLE_S + 10)
    marks.cancel()
    await asyncio.gather(marks, return_exceptions=True)
    assert (code, reason) == (1000, "idle timeout")
    assert IDLE_S - 0.5 <= time.monotonic() - started < IDLE_S + 3


async def keep_talking(client: NativeClient, every_s: float = 3.0) -> None:
    """Type a turn now and then: what keeps a session from being idle (audio alone does not)."""
    while True:
        await client.ws.send(json.dumps({"type": "text", "text": "Hello."}))
        await asyncio.sleep(every_s)


@pytest.mark.e2e
async def test_a_session_ends_at_the_time_limit_even_while_in_use(limited_url):
    client = await NativeClient.connect(limited_url)
    started = time.monotonic()
    streaming = asyncio.create_task(client.stream(silence(MAX_SESSION_S + 10)))
    talking = asyncio.create_task(keep_talking(client))
    code, reason = await closed_with(client, MAX_SESSION_S + 10)
    for task in (streaming, talking):
        task.cancel()
    await asyncio.gather(streaming, talking, return_exceptions=True)
    assert (code, reason) == (1000, "session time limit reached")
    assert MAX_SESSION_S - 0.5 <= time.monotonic() - started < MAX_SESSION_S + 5
    assert [m["code"] for m in client.json("error")] == ["session_time_limit"]


@pytest.mark.e2e
async def test_a_session_streaming_silence_is_idle(limited_url):
    """Audio frames are not activity: silence, or a byte now and then, does not hold a slot."""
    client = await NativeClient.connect(limited_url)
    started = time.monotonic()
    streaming = asyncio.create_task(client.stream(silence(IDLE_S + 10)))
    code, reason = await closed_with(client, IDLE_S + 10)
    streaming.cancel()
    await asyncio.gather(streaming, return_exceptions=True)
    assert (code, reason) == (1000, "idle timeout")
    assert IDLE_S - 0.5 <= time.monotonic() - started < IDLE_S + 3


@pytest.mark.e2e
async def test_abusive_clients_are_stopped_and_a_bystander_still_gets_its_answer(limited_url):
    bystander = await NativeClient.connect(limited_url)
    keep_alive = asyncio.create_task(bystander.stream(silence(MAX_SESSION_S - 2)))

    # Audio much faster than real time: the excess is dropped, reported once, the session goes on.
    flooder = await NativeClient.connect(limited_url)
    tenth = float_to_pcm16(np.zeros(1600, np.float32))
    for _ in range(100):  # 10 s of audio in a burst
        await flooder.ws.send(tenth)
    await flooder.ws.send(json.dumps({"type": "text", "text": "Hello?"}))
    await flooder.wait_for(lambda m: m.get("type") == "transcript" and m["role"] == "user", 10)
    # Once per run of dropped frames: a server slowed by other work may read the burst slowly enough for
    # the budget to admit a frame in the middle, which starts a second run.
    reports = [m["code"] for m in flooder.json("error")]
    assert set(reports) == {"audio_rate_exceeded"} and len(reports) <= 3, reports
    assert flooder.ws.close_code is None
    await flooder.close()
    # Typed turns keep the bystander from being idle; begun after the flood, whose frames must arrive
    # faster than the audio budget refills, for the one report.
    talking = asyncio.create_task(keep_talking(bystander))

    # Too many messages: told, then closed with 1008.
    spammer = await NativeClient.connect(limited_url)
    for _ in range(1000):
        await spammer.ws.send('{"type":"mark","name":"x"}')
    assert await closed_with(spammer) == (1008, "too many messages")
    assert [m["code"] for m in spammer.json("error")] == ["message_rate_exceeded"]

    # A frame over 1 MiB closes that connection with 1009; text that is not UTF-8 with 1007.
    oversized = await NativeClient.connect(limited_url)
    await oversized.ws.send(b"\x00" * ((1 << 20) + 2))
    assert (await closed_with(oversized))[0] == 1009
    garbled = await NativeClient.connect(limited_url)
    await garbled.ws.send(b'{"type": "text", "text": "\xff\xfe"}', text=True)
    assert (await closed_with(garbled))[0] == 1007

    # Through all that, the bystander was served as usual.
    for task in (keep_alive, talking):
        task.cancel()
    await asyncio.gather(keep_alive, talking, return_exceptions=True)
    await asyncio.sleep(1.0)  # the last typed turn's answer
    typed = max((m["turn"] for m in bystander.json("metrics")), default=0)
    await bystander.stream(np.concatenate([speech("What is the capital of France?"), silence(0.3)]))
    keep_alive = asyncio.create_task(bystander.stream(silence(5.0)))
    metrics = await bystander.wait_for(lambda m: m.get("type") == "metrics" and m["turn"] > typed, 15)
    assert metrics["voice_to_voice_ms"] > 0
    assert not bystander.json("error") and bystander.ws.close_code is None
    keep_alive.cancel()
    await asyncio.gather(keep_alive, return_exceptions=True)
    await bystander.close()
