"""Is the audio heard over the agent explained by the agent's own output?

On a speakerphone, or in a browser without echo cancellation, the agent's
voice comes back into its input: later by the way through the client, the
room and the network, quieter, smeared by the room. The server knows which
samples it sent and, by the same model of the client's buffer as the pacer,
when the client plays them. :class:`EchoReference` keeps that output, at the
pipeline rate on the server's clock, and tells whether an input window is
that output coming back.

The test compares loudness envelopes, not samples: the room response
smears the waveform beyond recognition but keeps the syllables' rise and
fall. Over the last ``WINDOW_S`` of input, the envelope is correlated with
the reference's at every lag up to ``MAX_LAG_S``; the best lag gives the
echo's gain. Input is echo when it correlates (``MIN_CORRELATION``), is
quieter than what was played (``MAX_GAIN``: an echo path loses a few dB at
least) and, once the path is settled, not much louder than it came back
before (``GAIN_JUMP``), and its latest blocks are no louder than that echo
predicts (``ONSET_MARGIN``; at the path's running gain once it is known): a
user starting to speak over the echo breaks the last condition at once,
before the long window stops correlating.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .audio import PIPELINE_RATE, StreamResampler
from .echo_suppression import HOP

BLOCK = PIPELINE_RATE // 100  # 10 ms envelope blocks: syllables last 100 to 300 ms
WINDOW_S = 0.48  # input compared: two or three syllables
MAX_LAG_S = 0.48  # the way back: the client's playback, the room (50 to 250 ms), the network both ways
# An echo path is found where the envelopes correlate this well at some lag (the echo rig's rooms
# through the server: 0.83 to 0.99, mostly above 0.9; another voice, by chance at one of 49 lags, up to
# 0.94 for synthetic voices); once found, its lag is where to look, and less is needed there.
MIN_CORRELATION = 0.9
PATH_CORRELATION = 0.75
# Separate input windows explained as echo before its path is the call's for sure: another voice correlates
# with the output by chance now and then (above), not window after window.
PATH_CONFIRMATIONS = 3
# Quieter than played, as every echo path is: the envelopes of the rig's -10 dB rooms compare at about
# 0.45, their loudest blocks smeared by the room; an 8 dB loss at 0.56.
MAX_GAIN = 0.7
# The client's queue ran dry this long: the output starts again, maybe through another path (the user took
# the phone off speaker, or the other way round), which is found anew.
NEW_OUTPUT_S = 0.5
# Input that correlates with the output at another lag than the stretch's path for this long moves the path
# there: a path found on a user's voice at the start of a stretch (an "okay" settled it wrong, and the echo
# of the rest of that answer was taken for speech). A user's voice correlated by chance for 450 ms at most.
REPATH_S = 1.0
REPATH_GAP_S = 0.3  # windows at that other lag this far apart are chance, each time
MIN_BLOCKS = 6  # input since the output began that the test needs: a syllable's rise
# The echo of a stretch's first output at the lag found that a path is settled on for the stretch: a -25 dB
# echo 237 ms late settled at 410 ms on the 50 ms that had come back at that lag (the echo rig), and its next
# syllables, unexplained there, paused the agent and cleared it with its own words ("That's wrong.").
SETTLE_BLOCKS = 15
# Once a stretch settled on its path, its echo comes back at about one gain, and a user's voice over it raises a
# window's own fit: "No," over a loud echo fitted at 1.6 times the stretch's 0.39 to 0.47, still under MAX_GAIN,
# and the onset test, predicting the echo from that inflated fit, let it through. Once the path's running gain is
# known (the median of its last GAIN_HISTORY windows explained), the onset test predicts from it, and a window
# fitting GAIN_JUMP times it is not echo. The echo's own fit drifts with what is said (1.5 to 2 times for a
# few hundred ms in some rooms): offline, over 30 of the rig's rooms and the eval's five interruptions, the users'
# first 16 speech windows taken for echo fell from 7.0 % to 2.6 %, and the echo's own speech windows left
# unexplained rose from 1.3 % to 1.5 %, none of them in longer runs (a jump of 1.5 tripled those runs). The
# prediction does most of it; the jump takes the windows between a user's syllables, whose latest blocks are
# quiet. A door slam in the window inflates its fit too, and the echo after it waits for the slam to leave it.
GAIN_JUMP = 2.0
GAIN_HISTORY = 20
# A window explained at a gain this far past the path's is not kept in its running gain: a user's voice under
# GAIN_JUMP ("Actually," over a -13 dB echo, at 1.6 to 1.9 times) raised the path's gain from 0.22 to 0.37 in
# 300 ms, and their next windows were taken for echo. Offline, the users' first windows taken for echo: 2.6 % to
# 2.1 % and 3.1 % to 3.0 % in two draws of 30 rooms, at no cost in the echo's.
GAIN_KEPT = 1.3
MIN_GAINS = 5  # windows explained on the settled path before their gain tells the path's
ONSET_BLOCKS = 3  # the latest input, which a user's onset makes louder than the echo
ONSET_MARGIN = 2.0  # amplitude over the echo predicted for the latest blocks (+6 dB) that is not echo
SMEAR_BLOCKS = 2  # the room spreads each block over the next few: the prediction takes the loudest
SILENT_RMS = 1e-4  # reference this quiet carries no envelope to compare
# Input this far under the output that played over it (-30 dB, past the rig's quietest -25 dB echo) holds
# no echo of it: a headset, a browser's echo cancellation.
SILENT_UNDER = 10 ** (-30 / 20)
INPUT_SAMPLES = int(WINDOW_S * PIPELINE_RATE) // BLOCK * BLOCK  # the input an answer needs
MAX_LAG_SAMPLES = int(MAX_LAG_S * PIPELINE_RATE) // BLOCK * BLOCK
# The input :meth:`EchoReference.silent_under` needs: the echo of its first half's output is in it over any path.
QUIET_INPUT_SAMPLES = 2 * MAX_LAG_SAMPLES
# Reference kept behind the present: what the echo test needs, and the barge-in check's span of input
# (the overlapping speech and the echo before it) for :meth:`EchoReference.played_over`.
KEEP_S = 3.0


def _envelope(audio: np.ndarray) -> np.ndarray:
    """RMS of each whole block."""
    blocks = len(audio) // BLOCK
    return np.sqrt(np.mean(audio[: blocks * BLOCK].reshape(blocks, BLOCK) ** 2, axis=1))


def _correlations(heard_env: np.ndarray, reference_env: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference envelope at every lag, aligned with ``heard_env`` (row k: k blocks late; the reference
    starts as many blocks before the input as the longest lag), and how well each correlates with it."""
    # Row k: the reference as it would be heard k blocks late, aligned with the input's blocks.
    lags = np.lib.stride_tricks.sliding_window_view(reference_env, len(heard_env))[::-1]
    centred = lags - lags.mean(axis=1, keepdims=True)
    heard_centred = heard_env - heard_env.mean()
    norms = np.linalg.norm(centred, axis=1) * np.linalg.norm(heard_centred)
    return lags, np.where(norms > 0, centred @ heard_centred / np.maximum(norms, 1e-12), 0.0)


class EchoReference:
    """The agent's output as the client plays it, at 16 kHz on the server's clock.

    Sample ``i`` of the reference plays at ``origin + i / 16000``. Like the
    pacer's :class:`~.pacing.PlaybackClock`, the client plays frames back to
    back from their arrival and drops what it has not played at ``clear``.
    """

    def __init__(self, origin: float):
        self._origin = origin
        self._audio = np.zeros(0, np.float32)
        self._start = 0  # reference index of self._audio[0]
        self._drains = 0  # index where the client's queue runs dry
        self._resampler: StreamResampler | None = None
        self._lag: int | None = None  # blocks: the echo path's delay, once one has been found
        self._settled = False  # this stretch of output came back on that path
        self._gains: deque[float] = deque(maxlen=GAIN_HISTORY)  # of the latest windows kept on the settled path
        # Another lag the output correlates at: the lag, and the reference indices of its first and last window.
        self._elsewhere: tuple[int, int, int] | None = None
        self._began = 0  # reference index where this stretch of output began
        self._finds = 0  # separate input windows explained as echo since the path was last forgotten
        self._last_find = -INPUT_SAMPLES  # reference index where the last of them ended

    def _index(self, at: float) -> int:
        return int(round((at - self._origin) * PIPELINE_RATE))

    def played(self, samples: np.ndarray, rate: int, at: float) -> None:
        """Output ``samples`` at ``rate`` were sent at ``at``: they play once what is queued has played."""
        if self._resampler is None or self._resampler.in_rate != rate:
            self._resampler = StreamResampler(rate, PIPELINE_RATE, "QQ")
        samples = self._resampler.process(samples)
        now = self._index(at)
        if now - self._drains > NEW_OUTPUT_S * PIPELINE_RATE:
            self._settled, self._elsewhere = False, None
            self._gains.clear()
            self._began = now
        begin = max(self._drains, now)
        end = begin + len(samples)
        if end - self._start > len(self._audio):
            grown = np.zeros(end - self._start, np.float32)
            grown[: len(self._audio)] = self._audio
            self._audio = grown
        self._audio[begin - self._start : end - self._start] = samples
        self._drains = end
        self._trim(now - int(KEEP_S * PIPELINE_RATE))

    def cleared(self, at: float) -> None:
        """The client dropped what it had not played by ``at``."""
        now = self._index(at)
        if now < self._start + len(self._audio):
            self._audio[max(0, now - self._start) :] = 0.0
        self._drains = min(self._drains, now)

    def _trim(self, keep_from: int) -> None:
        if keep_from > self._start:
            self._audio = self._audio[keep_from - self._start :]
            self._start = keep_from

    def _slice(self, start: int, end: int) -> np.ndarray:
        """Reference ``start`` to ``end``, silence where nothing was (or is still) kept."""
        out = np.zeros(end - start, np.float32)
        lo, hi = max(start, self._start), min(end, self._start + len(self._audio))
        if hi > lo:
            out[lo - start : hi - start] = self._audio[lo - self._start : hi - self._start]
        return out

    def explains(self, heard: np.ndarray, heard_end_at: float) -> bool:
        """Whether ``heard`` (16 kHz input, its last sample arriving at ``heard_end_at``) is this output's echo.

        ``heard`` needs :data:`INPUT_SAMPLES`; with less, it is not echo.
        """
        window = INPUT_SAMPLES
        max_lag = MAX_LAG_SAMPLES
        end = self._index(heard_end_at)
        if self._drains <= end - window - max_lag or len(heard) < window:
            return False  # nothing played that could come back now
        # The input from before this stretch of output began holds none of its echo: at an answer's start it is
        # the user's last words, and the echo's first windows would not correlate with the output for them.
        skip = max(0, self._began - (end - window)) // BLOCK
        if window // BLOCK - skip < MIN_BLOCKS:
            return False
        reference = _envelope(self._slice(end - window - max_lag, end))[skip:]
        if reference.max() < SILENT_RMS:
            return False
        heard_env = _envelope(heard[-window:])[skip:]
        lags, correlation = _correlations(heard_env, reference)
        best = int(np.argmax(correlation))
        finds_path = correlation[best] >= MIN_CORRELATION and (not self._settled or self._moved_to(best, end))
        if not finds_path:
            if self._lag is None:
                return False
            # On the path found before: a window with another voice in it correlates less, at other lags. Once
            # this stretch of output came back on a path, it keeps to it: a user's voice correlates with the
            # output at some other lag now and then ("Actually" at 0.92, 150 ms off the path of a -18 dB echo).
            nearby = slice(max(0, self._lag - SMEAR_BLOCKS), self._lag + SMEAR_BLOCKS + 1)
            best = nearby.start + int(np.argmax(correlation[nearby]))
            if correlation[best] < PATH_CORRELATION:
                return False
        played = lags[best]
        gain = float(heard_env @ played) / max(float(played @ played), 1e-12)
        path_gain = None if finds_path else self._path_gain()
        if gain > MAX_GAIN or (path_gain is not None and gain > GAIN_JUMP * path_gain):
            return False
        if finds_path:
            self._lag, self._elsewhere = best, None
            self._gains.clear()
            # Where this stretch began within the window, few blocks of it came back at a long lag, and an
            # onset correlates with another onset: a path found on them is found again at the next window.
            self._settled = (end - self._began) // BLOCK - best >= SETTLE_BLOCKS
        # The echo expected in the latest blocks: the loudest played into them at a lag a block or two either
        # side (the room smears, the lag is found to a block), the room carrying earlier blocks on.
        near = lags[max(0, best - SMEAR_BLOCKS) : best + SMEAR_BLOCKS + 1, -ONSET_BLOCKS - SMEAR_BLOCKS :]
        predicted = (gain if path_gain is None else path_gain) * float(near.max())
        explained = float(heard_env[-ONSET_BLOCKS:].max()) <= ONSET_MARGIN * predicted + SILENT_RMS
        if explained and end - self._last_find >= window:
            self._finds += 1
            self._last_find = end
        if explained and self._settled and (path_gain is None or gain <= GAIN_KEPT * path_gain):
            self._gains.append(gain)
        return explained

    def _path_gain(self) -> float | None:
        """The gain the settled path's echo came back at lately; None until enough of it came back."""
        return float(np.median(self._gains)) if len(self._gains) >= MIN_GAINS else None

    def _moved_to(self, lag: int, end: int) -> bool:
        """Whether the output, come back on the settled path before, has correlated at ``lag`` far from it for
        :data:`REPATH_S` up to reference index ``end``: the path was found wrong, or changed."""
        assert self._lag is not None
        if abs(lag - self._lag) <= SMEAR_BLOCKS:
            self._elsewhere = None
            return False
        if (
            self._elsewhere is None
            or abs(lag - self._elsewhere[0]) > SMEAR_BLOCKS
            or end - self._elsewhere[2] > REPATH_GAP_S * PIPELINE_RATE
        ):
            self._elsewhere = (lag, end, end)
            return False
        self._elsewhere = (self._elsewhere[0], self._elsewhere[1], end)
        return end - self._elsewhere[1] >= REPATH_S * PIPELINE_RATE

    def silent_under(self, heard: np.ndarray, heard_end_at: float) -> bool:
        """Whether ``heard`` (16 kHz input, its last sample arriving at ``heard_end_at``; over
        :data:`MAX_LAG_S` of it) is near silence (:data:`SILENT_UNDER`) beside the output whose echo would be
        in it over any path: no echo reaches the input. False when too little of that output played to tell."""
        max_lag = MAX_LAG_SAMPLES
        if len(heard) < max_lag + ONSET_BLOCKS * BLOCK:
            return False
        end = self._index(heard_end_at)
        back = _envelope(self._slice(end - len(heard), end - max_lag))
        # The loud blocks of each: syllables, not the gaps between them.
        played = float(np.quantile(back, 0.9))
        return played >= SILENT_RMS and float(np.quantile(_envelope(heard), 0.9)) <= SILENT_UNDER * played

    def played_through(self, length: int, heard_end_at: float) -> bool:
        """Whether one stretch of output played all through the output that :meth:`silent_under` compares
        ``length`` samples of input, the last arriving at ``heard_end_at``, with. Where it played through only
        part of it, as an answer ends, the input's loud blocks may be too few to count: its echo was there."""
        max_lag = MAX_LAG_SAMPLES
        end = self._index(heard_end_at)
        return self._began <= end - length and self._drains >= end - max_lag

    def path_confirmed(self) -> bool:
        """Whether the output has come back on a path, in separate windows enough that it is no chance."""
        return self._lag is not None and self._finds >= PATH_CONFIRMATIONS

    def forget_path(self) -> None:
        """The echo's path was found wrong: the input was near silence under the output (:meth:`silent_under`).

        A user's voice over the agent correlates with its output at one lag or another by chance (0.93 in
        scripts/bargein_eval without the echo rig), and a path, once found, takes the user's words for echo.
        """
        self._lag, self._elsewhere = None, None
        self._settled = False
        self._gains.clear()
        self._finds = 0

    def echo_path(self, heard: np.ndarray, heard_end_at: float, echo_alone: int) -> tuple[np.ndarray, int] | None:
        """The output as it played over ``heard`` (16 kHz input, its last sample arriving at ``heard_end_at``),
        and the lag at which it comes back in :data:`~.echo_suppression.HOP` blocks, for
        :func:`~.echo_suppression.suppress_echo`; None when ``heard`` holds no echo of it, or before
        :meth:`explains` has found the echo's path in this session.

        The lag is found on the first ``echo_alone`` samples of ``heard`` (the input before the
        speech over the agent), where the echo is alone: its own, as each call's path is.
        """
        max_lag = MAX_LAG_SAMPLES
        end = self._index(heard_end_at)
        if self._lag is None or self._drains <= end - len(heard) - max_lag:
            # Nothing played that could come back then; or no echo was ever found in this session, and on
            # less evidence a wrong path garbles the user's words and leaves the echo's.
            return None
        reference = self._slice(end - len(heard) - max_lag, end)
        reference_env = _envelope(reference)
        heard_env = _envelope(heard)
        playing = np.flatnonzero(reference_env >= SILENT_RMS)
        if len(playing) == 0:
            return None
        # From where the output could first be heard: before it, the input tells nothing of the path.
        lead = max_lag // BLOCK
        first = max(0, int(playing[0]) - lead)
        last = min(len(heard_env), max(echo_alone // BLOCK, first + INPUT_SAMPLES // BLOCK))
        if last - first < ONSET_BLOCKS:
            return None
        lags, correlation = _correlations(heard_env[first:last], reference_env[first : last + lead])
        # As in :meth:`explains`: at a lag at which little of the output has come back yet, an onset correlates
        # with the output's by chance (a -10 dB echo 168 ms late was taken out at 430 ms, 400 ms into its answer,
        # and its own words were left to clear it).
        echo_from = np.maximum(first, int(playing[0]) - lead + np.arange(len(correlation)))  # at each lag
        reached = last - echo_from >= SETTLE_BLOCKS
        correlation = np.where(reached, correlation, -1.0)
        lag = int(np.argmax(correlation))
        if correlation[lag] < PATH_CORRELATION:
            lag = self._lag  # the path this call's echo took before
        played = lags[lag]
        if float(heard_env[first:last] @ played) > MAX_GAIN * float(played @ played):
            if self._finds < PATH_CONFIRMATIONS:
                return None  # louder than the output: no echo path is (a voice that happens to keep its rhythm)
            # A loud sound over a call's echo (a hiss, a passing truck) hides the echo without taking it
            # away: its path is still where the echo comes back, and the suppression's fit finds the echo's
            # share under the noise (scripts/bargein_eval's long hiss read "I'm up." with the echo left in).
            lag = self._lag
        return reference[max_lag:], lag * BLOCK // HOP
