"""Settings for one server process.

Every setting is a field of :class:`Settings`, documented once in its
metadata, in one group per concern (``server``, ``stt``, ``turn_taking``, ``llm``,
``speech_output``, ``telephony``, ``limits``, ``access``, ``agent``) that :class:`Settings` joins
into one flat frozen dataclass. The command line and the ``VOICE_AGENT_*`` environment variables are
generated from these fields, so ``voice-agent serve --help`` always lists every
option. Precedence: CLI flag, then environment variable, then default.

Values are parsed here, once, into their field's type: a ``bool`` is
``--x``/``--no-x`` on the command line and ``1/0``, ``true/false``, ``yes/no``
or ``on/off`` in the environment; a ``tuple[str, ...]`` (a list, immutable
like the rest of the settings) is comma-separated in both, blanks dropped.
"""

from .llm import DEFAULT_SYSTEM_PROMPT, SPOKEN_ANSWER_RULES
from .settings import ENV_PREFIX, Settings, add_arguments

__all__ = ["DEFAULT_SYSTEM_PROMPT", "ENV_PREFIX", "SPOKEN_ANSWER_RULES", "Settings", "add_arguments"]
