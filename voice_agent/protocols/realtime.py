"""The OpenAI Realtime protocol (GA) at ``/v1/realtime``: a sans-I/O codec.

Every message is a JSON text frame with a ``type``. The client streams audio
as base64 in ``input_audio_buffer.append``; the server answers with the
Realtime server events (``session.created``, ``input_audio_buffer.*``,
``conversation.item.*``, ``response.*``, ``error``) and, once per turn if
the client asked for it, our own ``voice_agent.metrics``. Audio is PCM16 at 24 kHz by default, or G.711
μ-law or A-law at 8 kHz. The session runs at the input rate; output audio at
another rate is resampled here. Where the beta protocol's field names differ
a little (``input_audio_format: "g711_ulaw"``, a flat ``voice`` and
``turn_detection``, ``max_response_output_tokens``, ``modalities``) they are
accepted too. See ``docs/realtime.md``.

The codec holds no socket: the server feeds it what arrived and sends what it
returns. It keeps the conversation's ids: which item a transcript or audio
frame belongs to, and which answer an item id names. Its parts:
:mod:`.realtime_input` reads client events, :mod:`.realtime_output` renders
server events, :mod:`.realtime_conversation` holds the state they share.
"""

from __future__ import annotations

from .events import InputEvent, SessionUpdate
from .realtime_input import RealtimeInput
from .realtime_output import RealtimeOutput


class RealtimeProtocol(RealtimeInput, RealtimeOutput):
    """The whole codec: :class:`RealtimeInput` reads the client, :class:`RealtimeOutput` answers it."""

    name = "realtime"  # what session reports and agents call this protocol

    def opening(self) -> list[InputEvent]:
        """What the session is told before the client says anything: it answers with ``session.created``."""
        return [SessionUpdate(sample_rate=self.input_format.rate)]
