"""The Realtime codec's state, shared by its input handlers and its output renderers.

The ids of what the client sees (items, responses, events), the audio formats
each way, and which item a transcript or audio frame belongs to.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from ..audio import StreamResampler
from .realtime_fields import PCM, AudioFormat

DEFAULT_MODEL = "voice-agent"
# Items whose ids a later event may name (truncate, a merged turn): more than any client keeps unplayed.
REMEMBERED_ITEMS = 64
MAX_ID_CHARS = 64  # a client's item and event ids, echoed back: longer than the SDKs make


@dataclass
class Response:
    number: int
    id: str
    item_id: str
    # Fixed when it starts: its audio comes at the session rate of then, whatever the client changes meanwhile.
    format: AudioFormat
    resampler: StreamResampler
    transcript: str = ""  # what the agent said so far, or the heard part once it was interrupted
    calls: list[dict[str, Any]] = field(default_factory=list)  # its function_call items, told after its message


@dataclass
class UserItem:
    turn: int
    id: str
    audio_start_ms: int
    audio_end_ms: int = 0
    partial: str = ""  # the transcription deltas sent so far


@dataclass
class Conversation:
    """The ids of what the client sees, in order."""

    last_item: str | None = None
    speaking: UserItem | None = None  # speech started, not committed yet
    committed: deque[UserItem] = field(default_factory=deque)  # waiting for their transcripts
    response: Response | None = None
    responses: OrderedDict[str, int] = field(default_factory=OrderedDict)  # item id -> response number
    user_items: OrderedDict[int, str] = field(default_factory=OrderedDict)  # turn -> item id, recent turns
    items: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)  # recent items, as they stand


class RealtimeCodecState:
    """``metrics``: send ``voice_agent.metrics`` once per turn. Off by default: clients that
    validate every server event (the OpenAI Agents SDK) report an unknown type as an error.
    ``allow_client_prompt``: whether ``instructions`` may set the system prompt (``--allow-client-prompt``).
    """

    def __init__(self, model: str = "", metrics: bool = False, allow_client_prompt: bool = False) -> None:
        self.model = model or DEFAULT_MODEL
        self.metrics = metrics
        self.allow_client_prompt = allow_client_prompt
        self.input_format = PCM
        self.output_format = PCM
        self.session_rate = PCM.rate  # the rate of the session's audio, both ways
        # Both types are the same WebRTC noise suppression: the client's own is told back while it is on.
        self.noise_reduction = "near_field"
        self._ids = itertools.count(1)
        self.session_id = self._id("sess")
        self._created = False
        self._conversation = Conversation()

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"
