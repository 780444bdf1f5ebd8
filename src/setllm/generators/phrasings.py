"""Key-value documents in many phrasings: one seeded generator, two disjoint template lists.

Documents rows (:mod:`setllm.tasks.documents`) whose documents state facts "key -> value" in
one of several phrasings, the question asking one key's value in the matching phrasing. Keys
and values come in several kinds (UUIDs, two-word names, codes; 3-digit numbers, words, hex).
:data:`TRAIN` phrasings are for training mixes; :data:`HELD_OUT` phrasings are written apart
and appear in no training mix, so a measurement on them says whether an adapter learned to
read documents or learned one phrasing. No held-out document template shares a content word
(longer than three letters) with a training phrasing (tested). Values are drawn distinct within
a row, but a short value can occur inside another document's key (a 3-digit number inside a
UUID): the answer is the asked key's value, not any text that contains it.

``setllm data kv-phrased --phrasings train|held-out --docs 8 --n 300 --seed 1 --out F.jsonl``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from ..io.records import DataError
from .base import GeneratorConfig, at_least
from .documents import distinct, random_hex


@dataclass(frozen=True)
class Phrasing:
    name: str
    document: str  # "{key}" and "{value}"
    question: str  # "{key}"


TRAIN: tuple[Phrasing, ...] = (
    Phrasing("json", '"{key}": "{value}"', 'What is the value of key "{key}"?'),
    Phrasing("code-of", "The code for {key} is {value}.", "What is the code for {key}?"),
    Phrasing("arrow", "{key} -> {value}", "What does {key} map to?"),
    Phrasing("record", "Record {key} stores {value}.", "What does record {key} store?"),
    Phrasing("assigned", "{key} was assigned {value}.", "What was {key} assigned?"),
    Phrasing("colon", "{key}: {value}", "Give the entry for {key}."),
    Phrasing("password", "The password of {key} is {value}.", "What is the password of {key}?"),
    Phrasing("label", "Item {key} carries the label {value}.", "Which label does item {key} carry?"),
)

HELD_OUT: tuple[Phrasing, ...] = (
    Phrasing("locker", "Locker {key} contains {value}.", "What is inside locker {key}?"),
    Phrasing("equals", "{key} = {value}", "{key} = ?"),
    Phrasing("registry", "According to the registry, {key} corresponds to {value}.", "According to the registry, what does {key} correspond to?"),
    Phrasing("ticket", "Ticket {key} belongs to seat {value}.", "Which seat does ticket {key} belong to?"),
)

# More training phrasings, written after a reading without the question in view (`sbp`) was seen
# copying the word before the value on held-out ones ("seat 684"): a noun before the value, the
# value first, markup. They share no content word with HELD_OUT (tested), so HELD_OUT stays unseen.
TRAIN_MORE: tuple[Phrasing, ...] = (
    Phrasing("shelf", "Parcel {key} goes to shelf {value}.", "Which shelf does parcel {key} go to?"),
    Phrasing("room", "Guest {key} stays in room {value}.", "Which room does guest {key} stay in?"),
    Phrasing("phone", "The phone number of {key} is {value}.", "What is the phone number of {key}?"),
    Phrasing("owner", "{value} owns {key}.", "Who owns {key}?"),
    Phrasing("platform", "Train {key} leaves from platform {value}.", "From which platform does train {key} leave?"),
    Phrasing("alias", "{key} is also known as {value}.", "What else is {key} known as?"),
    Phrasing("csv", "{key},{value}", "In these comma-separated rows, what comes after {key}?"),
    Phrasing("xml", '<entry id="{key}">{value}</entry>', "What is the text of the entry with id {key}?"),
    Phrasing("pin", "Account {key} uses the PIN {value}.", "Which PIN does account {key} use?"),
    Phrasing("tuple", "({key}, {value})", "Which value is paired with {key}?"),
    Phrasing("for", "For {key}, the answer is {value}.", "For {key}, what is the answer?"),
    Phrasing("stamp", "Envelope {key} bears stamp {value}.", "Which stamp does envelope {key} bear?"),
)

# A second held-out list, written together with TRAIN_MORE and kept out of every training mix: a
# measurement on it says whether rows shaped by HELD_OUT's misses read phrasings nobody looked at.
HELD_OUT_2: tuple[Phrasing, ...] = (
    Phrasing("gate", "Flight {key} boards at gate {value}.", "At which gate does flight {key} board?"),
    Phrasing("nickname", "People call {key} by the nickname {value}.", "What nickname do people call {key} by?"),
    Phrasing("bullet", "* {key} — {value}", "* {key} — ?"),
    Phrasing("vault", "Inside vault {key} there is {value}.", "What is there inside vault {key}?"),
)

PHRASINGS = {"train": TRAIN, "train-more": TRAIN_MORE, "held-out": HELD_OUT, "held-out-2": HELD_OUT_2}

_ADJECTIVES = ("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lofty",
               "misty", "noble", "olive", "proud", "quiet", "rusty", "silent", "tidy", "urban", "vivid", "wild", "young")
_NOUNS = ("anchor", "badger", "candle", "dolphin", "ember", "falcon", "garden", "harbor", "island", "jacket", "kettle", "lantern",
          "meadow", "needle", "orchard", "pepper", "quarry", "river", "saddle", "tower", "valley", "willow", "yarn", "zebra")
_WORDS = ("apple", "bronze", "cobalt", "daisy", "eagle", "fjord", "granite", "hazel", "indigo", "juniper", "koala", "lemon",
          "maple", "nutmeg", "opal", "plum", "quartz", "raven", "sage", "tulip", "umber", "violet", "walnut", "xenon")


KEY_KINDS: dict[str, Callable[[random.Random], str]] = {
    "uuid": lambda rng: random_hex(rng, 32),  # 32 digits: a UUID
    "words": lambda rng: f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}",
    "code": lambda rng: f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}-{rng.randrange(1000, 10000)}",
}
VALUE_KINDS: dict[str, Callable[[random.Random], str]] = {
    "uuid": lambda rng: random_hex(rng, 32),
    "number": lambda rng: str(rng.randrange(100, 1000)),
    "word": lambda rng: rng.choice(_WORDS),
    "hex": lambda rng: random_hex(rng, 8),
}


def kv_phrased(phrasings: str = "train", docs: int = 8, n: int = 300, seed: int = 0) -> list[dict]:
    """``n`` documents rows of ``docs`` facts each: per row, a phrasing of ``PHRASINGS[phrasings]``
    and a key kind and a value kind drawn with ``random.Random(seed)``; keys and values
    distinct within a row (one document answers), the asked key uniform over positions."""
    if phrasings not in PHRASINGS:
        raise DataError(f"unknown phrasings {phrasings!r}; choose one of: {', '.join(PHRASINGS)}")
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        ph = rng.choice(PHRASINGS[phrasings])
        key_kind, value_kind = rng.choice(sorted(KEY_KINDS)), rng.choice(sorted(VALUE_KINDS))
        keys = distinct(KEY_KINDS[key_kind], rng, docs)
        values = distinct(VALUE_KINDS[value_kind], rng, docs)
        gold = rng.randrange(docs)
        rows.append({"id": f"kvp-{phrasings}-k{docs}-s{seed}-{i}", "documents": [ph.document.format(key=k, value=v) for k, v in zip(keys, values)],
                     "question": ph.question.format(key=keys[gold]), "answer": values[gold], "gold": gold,
                     "phrasing": ph.name, "key_kind": key_kind, "value_kind": value_kind})
    return rows


@dataclass
class KVPhrasedConfig(GeneratorConfig):
    """``setllm data kv-phrased``: key-value documents in many phrasings (train or held-out)."""

    n: int = field(default=300, metadata={"help": "questions to generate", "metavar": "N"})
    phrasings: str = field(default="train", metadata={"help": "which phrasings: train, train-more (training mixes); held-out, held-out-2 (never trained on)",
                                                        "choices": list(PHRASINGS)})
    docs: int = field(default=8, metadata={"help": "documents (facts) per question", "metavar": "K"})

    def check(self) -> None:
        at_least(docs=(self.docs, 2))
