"""speakable(): what a small LLM writes for a screen, rewritten for a voice."""

from __future__ import annotations

import pytest

from voice_agent.engines.speakable import speakable, unspeakable


@pytest.mark.parametrize(
    "written, spoken",
    [
        # List bullets and numbering are dropped (each item is its own chunk: the chunker splits lines).
        ("- 1 cup of quinoa", "1 cup of quinoa"),
        ("* Fresh basil", "Fresh basil"),
        ("• Olive oil", "Olive oil"),
        ("1. Preheat the oven.", "Preheat the oven."),
        ("2) Mix it well.", "Mix it well."),
        ("Ingredients: - 1 cup of quinoa - 1 cup of lentils", "Ingredients: 1 cup of quinoa, 1 cup of lentils"),
        # Markdown.
        ("**Sure!** We are *open* today.", "Sure! We are open today."),
        ("## Opening hours", "Opening hours"),
        ("__Note__: bring ID.", "Note: bring ID."),
        ("Run `ls -la` to list files.", "Run ls -la to list files."),
        ("```python", ""),
        ("See [our menu](https://example.com/menu) for more.", "See our menu for more."),
        ("| Monday | 9am-5pm |", "Monday, 9am to 5pm"),
        ("|---|---|", ""),
        ("> Quoted advice here.", "Quoted advice here."),
        ("Line one<br>line two", "Line one line two"),
        # Emoji and symbols.
        ("Have a great day! 😀👍", "Have a great day!"),
        ("Thanks 🙏🏽 see you ❤️", "Thanks see you"),
        ("Go left → then right", "Go left to then right"),
        # Code: a line of it is dropped, words about it are not.
        ("def sort_list(lst):", ""),
        ("    return sorted(lst)", ""),
        ("import os", ""),
        ("from math import pi", ""),
        ("print('hello')", ""),
        ("result = sorted(items)", ""),
        ("const x = 5;", ""),
        ("Here's a Python function that sorts a list:", "Here's a Python function that sorts a list:"),
        ("Return it to the shop, and import nothing.", "Return it to the shop, and import nothing."),
        ("Class starts at nine.", "Class starts at nine."),
        ("return it tomorrow.", "return it tomorrow."),  # a chunk after "I'll take it,"
        # URLs and e-mail addresses.
        ("Book at https://www.example.com/book?x=1.", "Book at example.com."),
        ("Visit www.luigis.it today", "Visit luigis.it today"),
        ("Write to info@example.com please.", "Write to info@example.com please."),
        # Arithmetic and symbols become words.
        ("That is 3 hours * 60 minutes.", "That is 3 hours times 60 minutes."),
        ("2*3 is 6", "2 times 3 is 6"),
        ("5 x 4 = 20", "5 times 4 = 20"),
        ("10 - 3 = 7", "10 minus 3 = 7"),
        ("10 / 2 is 5, and 8 ÷ 4 is 2.", "10 divided by 2 is 5, and 8 divided by 4 is 2."),
        ("Add 1/2 cup of sugar and 3/4 cup of flour.", "Add a half cup of sugar and three quarters cup of flour."),
        ("We are open 24/7.", "We are open 24 7."),
        ("Bring food and/or drinks.", "Bring food and or drinks."),
        ("It costs $5, or $3.50 for kids, or €10.", "It costs 5 dollars, or 3 dollars 50 for kids, or 10 euros."),
        ("Just $1.", "Just 1 dollar."),
        ("It is 20°C, about 68°F.", "It is 20 degrees Celsius, about 68 degrees Fahrenheit."),
        ("It takes ~5 minutes.", "It takes about 5 minutes."),
        ("We are #1 in town.", "We are number 1 in town."),
        ("If x < 5 and y > 2.", "If x less than 5 and y more than 2."),
        ("We are open 9-5, Mon-Fri.", "We are open 9 to 5, Monday to Friday."),
        ("Open Monday–Friday, 9:00–17:30.", "Open Monday to Friday, 9:00 to 17:30."),
        ("Call 555-1234.", "Call 555-1234."),
        ("Rock & roll, 50% off.", "Rock & roll, 50% off."),
        # Plain spoken text is untouched.
        ("I'm sorry for the wait, it's 3.5 km away.", "I'm sorry for the wait, it's 3.5 km away."),
        ("Well — maybe.", "Well — maybe."),
    ],
)
def test_speakable(written, spoken):
    assert speakable(written) == spoken
    assert speakable(spoken) == spoken  # idempotent: the reply and Piper's wrapper both apply it
    assert unspeakable(speakable(written)) == []


def test_unspeakable_finds_markup_emoji_and_symbols_but_not_words_or_spoken_symbols():
    assert unspeakable("**Hi** 😀 #1 a/b ~ | ^ → ©") == ["*", "*", "*", "*", "😀", "#", "/", "~", "|", "^", "→", "©"]
    assert unspeakable("It's 50% off, A & B @ 9, 3 + 4 = 7 — ok? “Yes.”") == []


def test_arbitrary_text_always_comes_out_speakable():
    text = "".join(chr(code) for code in range(32, 0x2FFF)) + "🎉🧑‍🍳🇮🇪#️⃣"
    assert unspeakable(speakable(text)) == []
