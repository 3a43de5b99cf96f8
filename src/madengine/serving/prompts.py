"""The prompts of a serving benchmark: synthetic ones of a given length, or a user's ShareGPT file.

Nothing is downloaded. A synthetic prompt is ``input_len`` words drawn (seeded) from a fixed list
of short English words, a different sequence for every request so that no server's prefix cache
makes them cheaper; most BPE tokenizers make one token of each word (with its leading space), and
the row says how many tokens the server counted (``usage``). A ShareGPT file is a JSON list of
``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``: the
first turn is the prompt, and without ``--output-len`` the reply's length in words is the request's
``max_tokens``, as vLLM's benchmark takes it from the reply.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from madengine.core.errors import InputError

WORDS = ("time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
         "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
         "company", "system", "program", "question", "work", "number", "night", "point", "home", "water",
         "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye",
         "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend", "father",
         "power", "hour", "game", "line", "end", "member", "law", "car", "city", "name", "team", "minute")
MAX_LEN = 1_000_000  #: words of a prompt, tokens of a reply
SHAREGPT_HINT = 'a ShareGPT file is a JSON list of {"conversations": [{"from": "human", "value": "..."}, ...]}'


@dataclasses.dataclass(frozen=True)
class Prompt:
    text: str
    output_len: int  #: the request's max_tokens
    input_words: int


def synthetic(count: int, input_len: int, output_len: int, seed: int = 0) -> list[Prompt]:
    """``count`` prompts of ``input_len`` words each (seeded), each asking for ``output_len`` tokens."""
    rng = random.Random(seed)
    return [Prompt(" ".join(rng.choice(WORDS) for _ in range(input_len)), output_len, input_len)
            for _ in range(count)]


def sharegpt(path: Path, count: int, output_len: int | None, seed: int = 0, flag: str = "--dataset") -> list[Prompt]:
    """``count`` prompts from a ShareGPT file (taken in a seeded random order, repeated when the file
    has fewer); a file that is not ShareGPT JSON is an :class:`InputError` naming it."""
    from madengine.core.jsonio import read_json_file

    shown = f"{flag} {path}"
    entries = read_json_file(path, shown=shown, hint=SHAREGPT_HINT)
    if not isinstance(entries, list) or not entries:
        raise InputError("is not a non-empty JSON list", path=shown, hint=SHAREGPT_HINT)
    pairs = [_conversation(entry, number, shown) for number, entry in enumerate(entries)]
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    prompts = []
    for index in range(count):
        text, reply_words = pairs[order[index % len(order)]]
        wanted = output_len if output_len is not None else max(1, min(reply_words, MAX_LEN))
        prompts.append(Prompt(text, wanted, len(text.split())))
    return prompts


def _conversation(entry: Any, number: int, shown: str) -> tuple[str, int]:
    """(the first turn's text, the reply's length in words) of one ShareGPT entry."""
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(turns, list) or len(turns) < 2:
        raise InputError(f"entry {number} has no 'conversations' list of two turns or more", path=shown,
                         hint=SHAREGPT_HINT)
    texts = []
    for turn in turns[:2]:
        value = turn.get("value") if isinstance(turn, dict) else None
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"entry {number}: a turn has no text 'value'", path=shown, hint=SHAREGPT_HINT)
        texts.append(value)
    return texts[0], len(texts[1].split())
