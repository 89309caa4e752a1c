"""Client-side latency measurement: replay recorded turns against a running agent.

See ``docs/replay.md``. The measurement code (``measure``) is pure; the
socket (``transport``), the pacing and scheduling (``runner``), the report
(``report``) and the pictures (``plots``) are each their own module.
"""
