"""Where the model files made from the embedded ones are kept: ``$XDG_CACHE_HOME/voice-agent``.

The llama.cpp backend keeps its Q8_0 copy of the embedded GGUF there
(``requantize.py``), and the vLLM backend its Hugging Face conversion
(``vllm_engine.py``).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "voice-agent"
