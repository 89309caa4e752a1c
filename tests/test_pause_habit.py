from voice_agent.turn_taking.pause_habit import MIN_PAUSE_MS, PAUSE_MARGIN_MS, RECENT_PAUSES, PauseHabit


def test_no_pause_seen_keeps_the_base():
    assert PauseHabit().telling_ms(2000) == 2000


def test_a_longer_pause_than_the_base_raises_it_to_that_pause_and_a_margin():
    habit = PauseHabit(max_ms=3000)
    habit.went_on_after(1500)
    assert habit.telling_ms(2000) == 2000  # shorter than the base: nothing changes
    habit.went_on_after(2200)
    assert habit.telling_ms(2000) == 2200 + PAUSE_MARGIN_MS
    habit.went_on_after(9000)
    assert habit.telling_ms(2000) == 3000  # never past the cap


def test_gaps_of_ordinary_speech_rhythm_are_not_pauses():
    habit = PauseHabit()
    habit.went_on_after(MIN_PAUSE_MS - 1)
    assert habit.telling_ms(100) == 100


def test_only_recent_pauses_count():
    habit = PauseHabit(max_ms=5000)
    habit.went_on_after(2800)
    for _ in range(RECENT_PAUSES):
        habit.went_on_after(400)
    assert habit.telling_ms(350) == 400 + PAUSE_MARGIN_MS


def test_only_pauses_within_a_turn_say_how_long_the_user_thinks_between_sentences():
    habit = PauseHabit()
    assert habit.longest_within_turns_ms() == 0
    habit.went_on_after(900, into_answer=True)  # "Sorry, make that five people": a correction as often as more
    assert habit.longest_within_turns_ms() == 0
    assert habit.telling_ms(350) == 900 + PAUSE_MARGIN_MS  # a telling still waits past it
    habit.went_on_after(800)
    habit.went_on_after(400)
    assert habit.longest_within_turns_ms() == 800
