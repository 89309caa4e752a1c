from voice_agent.reply.pacing import PlaybackClock


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_frames_flow_until_the_lead_is_full_then_at_real_time():
    clock = FakeClock()
    pacer = PlaybackClock(lead_s=0.2, clock=clock)
    sent = 0
    while pacer.delay() == 0:
        pacer.sent(0.02)
        sent += 1
    assert sent == 11  # 200 ms of lead, plus the frame that fills it
    clock.now += 0.02
    assert pacer.delay() == 0
    pacer.sent(0.02)
    assert abs(pacer.delay() - 0.02) < 1e-9


def test_played_and_buffered_after_an_underrun():
    clock = FakeClock()
    pacer = PlaybackClock(lead_s=0.2, clock=clock)
    for _ in range(10):
        pacer.sent(0.02)
    clock.now += 0.05
    assert abs(pacer.played_s() - 0.05) < 1e-9
    assert abs(pacer.buffered_s() - 0.15) < 1e-9
    clock.now += 1.0  # the client ran dry
    assert pacer.buffered_s() == 0
    assert abs(pacer.played_s() - 0.2) < 1e-9
    pacer.sent(0.02)  # a new frame plays from now, not from the past
    assert abs(pacer.buffered_s() - 0.02) < 1e-9


def test_reset_forgets_the_client_buffer():
    clock = FakeClock()
    pacer = PlaybackClock(lead_s=0.2, clock=clock)
    for _ in range(20):
        pacer.sent(0.02)
    pacer.reset()
    assert pacer.delay() == 0 and pacer.played_s() == 0
