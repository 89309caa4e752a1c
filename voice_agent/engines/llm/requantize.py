"""Convert a GGUF model to Q8_0 once, and keep the copy in a cache folder.

The embedded SmolLM2 ships as Q4_1, which llama.cpp evaluates with generic
kernels on x86. From Q8_0 it evaluated a 54-token prompt at 2.4 ms a token
instead of 3.6 (2 threads, 2-core AMD EPYC with AVX2; docs/results/latency.md); generating
tokens cost the same. The prompt is what the user waits for at every turn
(the new question, and the whole history when its window steps).

The conversion adds little error: a Q4_1 block holds 16 levels, and Q8_0's
255 levels over the same block are off by at most about 3 % of one Q4_1
step. The answers still change, because llama.cpp multiplies Q8_0 weights
with differently quantized activations and a 135M model's greedy choice
tips on small differences: on five test questions the two files gave the
same greedy answer once; neither was better overall (only the Q8_0 copy said
Paris is the capital of France). The copy is 145 MB next to the package's 98 MB.
"""

from __future__ import annotations

import ctypes
import logging
import os
import tempfile
from pathlib import Path

from .model_cache import cache_dir

log = logging.getLogger(__name__)


def q8_0_copy(model_path: str, folder: Path | None = None) -> str:
    """The path of a Q8_0 copy of ``model_path``, made now if not cached yet.

    The copy's name carries the source's size and modification time, so a
    changed source gets a new copy. If the copy cannot be made (a read-only
    home, a full disk), the original is used and a warning says why.
    """
    import llama_cpp

    source = Path(model_path)
    stat = source.stat()
    folder = folder or cache_dir()
    target = folder / f"{source.stem}.{stat.st_size}-{stat.st_mtime_ns}.q8_0.gguf"
    if target.exists():
        return str(target)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Written under a temporary name and renamed: two servers starting at once
        # never load a half-written file.
        handle, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
        os.close(handle)
    except OSError as exc:
        log.warning("cannot cache a Q8_0 copy of %s in %s (%s); using it as it is", source, folder, exc)
        return model_path
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    log.info("converting %s to Q8_0 once, into %s", source, target)
    try:
        failed = llama_cpp.llama_model_quantize(str(source).encode(), partial.encode(), ctypes.byref(params))
        if failed:
            raise OSError(f"llama_model_quantize returned {failed}")
        os.replace(partial, target)
    except OSError as exc:
        log.warning("converting %s to Q8_0 failed (%s); using it as it is", source, exc)
        return model_path
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return str(target)
