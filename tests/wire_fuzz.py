"""Hypothesis strategies for wire messages: any JSON value at any path, including the values that broke codecs.

Python's ``json.dumps`` cannot write an integer of over 4300 digits, so such a
value is generated as the placeholder :data:`HUGE_INT` and :func:`dumps`
swaps in the digits.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

HUGE_INT = "\x00huge-int"
HUGE_DIGITS = "9" * 5000

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**19, max_value=10**400)  # past the codecs' digit cap
    | st.just(HUGE_INT)
    | st.floats()  # NaN and infinities too: dumps writes them as NaN and Infinity
    | st.text(max_size=20)
    | st.text(max_size=3000)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
# Nesting deeper than any codec reads, as raw text.
deep = st.integers(min_value=9, max_value=5000).map(lambda n: "[" * n + "1" + "]" * n)


def dumps(value) -> str:
    return json.dumps(value).replace(json.dumps(HUGE_INT), HUGE_DIGITS)
