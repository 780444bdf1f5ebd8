"""Natural-language documents about fictional worlds: companies, towns, people, products,
clubs, each stated one fact a document, asked in other words than it is stated.

A *set* of documents is drawn from a few entities of one family's domains, each entity with
several relations (who, where, when, how many, what kind): the distractors of a question are
the same entity's other facts and the same relation of other entities, so the words of the
question are in many documents and only one answers it. Several questions are asked over one
set (``set`` names it: a reader that gives one answer to several of them shows it), and one
question per set that no document answers (``"answer": null``: what does the reader say?).

Families of templates, written apart (no training template shares its question with a
held-out one, tested):

- ``train``: companies, towns and people in training phrasings (for training mixes);
- ``held-out``: the same domains stated and asked in other words (never trained on);
- ``held-out-2``: products and clubs, domains no training mix holds, in their own words.

``setllm data worlds --family held-out --docs 8 --n 40 --seed 0 --out natural.jsonl``.
Rows are documents rows (:mod:`setllm.tasks.documents`) with ``set``, ``relation``, ``entity``
and ``answer_type`` beside them (and, for a question no document answers, the ``withheld`` value
that the unstated fact holds: in no document).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..io.records import DataError
from .base import GeneratorConfig, at_least

# -- values ---------------------------------------------------------------------------------
_FIRST = ("Marta", "Tomasz", "Ines", "Kofi", "Priya", "Lars", "Aiko", "Rafael", "Nadia", "Owen", "Selin", "Dmitri", "Femi", "Clara",
          "Hugo", "Yara", "Bilal", "Greta", "Mateo", "Lin", "Esther", "Jonas", "Amara", "Pavel", "Rosa", "Idris", "Wen", "Freya")
_LAST = ("Osei", "Lindqvist", "Moreau", "Tanaka", "Okafor", "Brandt", "Castillo", "Novak", "Haddad", "Reyes", "Kowalski", "Achterberg",
         "Mensah", "Duarte", "Sorensen", "Farouk", "Whitcombe", "Iyer", "Petrakis", "Halloran", "Vasquez", "Ekström", "Abara", "Quint")
_PLACES = ("Lisbon", "Tampere", "Port Alden", "Graz", "Marrowby", "Kestrel Bay", "Ghent", "Valdora", "Osaka", "Thornwick", "Quebec City",
           "Brindlemoor", "Cork", "Saltmere", "Bergen", "Ashcombe", "Trieste", "Duncaster", "Leipzig", "Harrowgate", "Nantes", "Wexley")
_ANIMALS = ("fox", "heron", "otter", "badger", "lynx", "puffin", "tortoise", "owl", "hedgehog", "walrus", "beaver", "falcon", "moose", "gecko")
_TIMES = ("6 am", "6:30 am", "7 am", "7:30 am", "8 am", "8:30 am", "9 am", "9:30 am", "10 am", "10:30 am", "11 am", "noon")
_GOODS = ("garden tools", "bicycles", "herbal tea", "wool socks", "board games", "solar panels", "kitchen knives", "hiking boots",
          "desk lamps", "ceramic tiles", "dog food", "rain jackets", "violins", "canned soup")
_RIVERS = ("Ambler", "Tessa", "Corrin", "Wend", "Oster", "Lune", "Varrow", "Isel", "Mardle", "Kell", "Sorrow", "Thane")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December")
_REGIONS = ("Northmarch", "the Vell Valley", "Eastholm", "Carrowshire", "the Low Fens", "Westerby", "Dunmark", "the High Moors",
            "Silverdale", "Oakenshire")
_DISHES = ("eel pie", "plum dumplings", "smoked trout", "barley soup", "cheese scones", "lamb stew", "apple fritters", "mussel broth",
           "onion tart", "walnut bread")
_JOBS = ("nurse", "carpenter", "pilot", "librarian", "chemist", "baker", "plumber", "architect", "translator", "dentist", "welder", "florist")
_DOGS = ("Biscuit", "Pepper", "Juno", "Rufus", "Mango", "Pip", "Ziggy", "Nutmeg", "Olive", "Bruno", "Hazel", "Tofu")
_SPORTS = ("tennis", "rugby", "badminton", "volleyball", "handball", "cricket", "squash", "water polo", "lacrosse", "table tennis")
_COLOURS = ("teal", "mustard yellow", "crimson", "charcoal grey", "olive green", "navy blue", "burnt orange", "lilac", "ivory", "plum",
            "sky blue", "forest green", "rust red", "sand beige", "coral pink", "slate blue", "pearl white", "jet black")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_VENUES = ("the old library", "the town hall", "the boathouse", "a church basement", "the railway café", "the community centre",
           "the museum cellar", "the school gym", "the lighthouse", "the mill")
_SYLLABLES = ("quill", "fern", "brin", "dle", "wick", "mar", "lo", "tav", "en", "cor", "sel", "dun", "rav", "ith", "ost", "bel",
              "var", "kin", "thal", "mor", "pen", "ash", "gar", "lun", "hes", "ton")


def _person(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def _coined(rng: random.Random) -> str:
    """An invented proper name (Quillfern, Dunravith): no model knows facts about it."""
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 3)))).capitalize()


def _pick(pool: Sequence[str]) -> Callable[[random.Random], str]:
    return lambda rng: rng.choice(pool)


def _number(lo: int, hi: int) -> Callable[[random.Random], str]:
    return lambda rng: str(rng.randrange(lo, hi))


# -- relations --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Relation:
    """One kind of fact about an entity: the kind of its answer, how values are drawn, and per
    template family the document ("{e}": the entity, "{v}": the value) and the question."""

    name: str
    answer_type: str  # person, place, year, number, time, name, kind
    value: Callable[[random.Random], str]
    templates: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class Domain:
    name: str
    entity: Callable[[random.Random], str]
    relations: tuple[Relation, ...]


R = Relation
COMPANY = Domain("company", _coined, (
    R("employees", "number", _number(12, 4800), {
        "train": ("{e} employs {v} people.", "How many people does {e} employ?"),
        "held-out": ("The staff of {e} numbers {v}.", "What is the headcount at {e}?")}),
    R("engineering_head", "person", _person, {
        "train": ("{v} is the head of engineering at {e}.", "Who is the head of engineering at {e}?"),
        "held-out": ("At {e}, engineering is led by {v}.", "Which person runs the engineering team of {e}?")}),
    R("headquarters", "place", _pick(_PLACES), {
        "train": ("{e} has its headquarters in {v}.", "Where is {e} headquartered?"),
        "held-out": ("The main office of {e} sits in {v}.", "In what city would you find the main office of {e}?")}),
    R("founded", "year", _number(1850, 2021), {
        "train": ("{e} was founded in {v}.", "When was {e} founded?"),
        "held-out": ("{e} opened its doors for the first time in {v}.", "In which year did {e} start out?")}),
    R("mascot", "name", _pick(_ANIMALS), {
        "train": ("The mascot of {e} is a {v}.", "What animal is the mascot of {e}?"),
        "held-out": ("A {v} is drawn on every badge that {e} hands out.", "Which creature is pictured on the badges of {e}?")}),
    R("opening", "time", _pick(_TIMES), {
        "train": ("{e} opens at {v} every weekday.", "At what time does {e} open on weekdays?"),
        "held-out": ("On weekdays the doors of {e} are unlocked at {v}.", "When do the doors of {e} get unlocked on a weekday?")}),
    R("goods", "kind", _pick(_GOODS), {
        "train": ("{e} makes {v}.", "What does {e} make?"),
        "held-out": ("{e} earns its money selling {v}.", "What kind of goods does {e} sell?")}),
))
TOWN = Domain("town", _coined, (
    R("mayor", "person", _person, {
        "train": ("The mayor of {e} is {v}.", "Who is the mayor of {e}?"),
        "held-out": ("{v} was elected to lead the council of {e}.", "Who heads the council of {e}?")}),
    R("population", "number", _number(300, 90000), {
        "train": ("{e} has a population of {v}.", "How many people live in {e}?"),
        "held-out": ("Some {v} residents call {e} home.", "What is the number of inhabitants of {e}?")}),
    R("river", "name", _pick(_RIVERS), {
        "train": ("The river that flows through {e} is the {v}.", "Which river flows through {e}?"),
        "held-out": ("{e} was built on the banks of the {v}.", "On the banks of what river does {e} stand?")}),
    R("festival", "time", _pick(_MONTHS), {
        "train": ("{e} holds its harvest festival in {v}.", "When is the harvest festival of {e}?"),
        "held-out": ("Every {v}, the people of {e} celebrate the harvest.", "In what month is the harvest celebrated in {e}?")}),
    R("settled", "year", _number(1100, 1950), {
        "train": ("{e} was settled in {v}.", "When was {e} settled?"),
        "held-out": ("The first houses of {e} went up in {v}.", "What year did the first houses of {e} go up?")}),
    R("region", "place", _pick(_REGIONS), {
        "train": ("{e} lies in the region of {v}.", "In which region is {e}?"),
        "held-out": ("{e} belongs to the province of {v}.", "What province is {e} part of?")}),
    R("dish", "kind", _pick(_DISHES), {
        "train": ("The best-known dish of {e} is {v}.", "What is the best-known dish of {e}?"),
        "held-out": ("Visitors to {e} always order {v}.", "Which food do visitors to {e} always order?")}),
))
PERSON = Domain("person", _person, (
    R("job", "kind", _pick(_JOBS), {
        "train": ("{e} works as a {v}.", "What is the job of {e}?"),
        "held-out": ("{e} earns a living as a {v}.", "What does {e} do for a living?")}),
    R("birthplace", "place", _pick(_PLACES), {
        "train": ("{e} was born in {v}.", "Where was {e} born?"),
        "held-out": ("The home town of {e} is {v}.", "Which town does {e} come from?")}),
    R("birth_year", "year", _number(1940, 2005), {
        "train": ("{e} was born in the year {v}.", "In what year was {e} born?"),
        "held-out": ("{e} came into the world in {v}.", "What is the year of birth of {e}?")}),
    R("dog", "name", _pick(_DOGS), {
        "train": ("{e} has a dog called {v}.", "What is the name of the dog of {e}?"),
        "held-out": ("{v} is the name of the dog that lives with {e}.", "What do they call the dog living with {e}?")}),
    R("running", "number", _number(11, 96), {
        "train": ("{e} runs {v} kilometres every week.", "How far does {e} run each week?"),
        "held-out": ("Each week, {e} covers {v} kilometres on foot.", "How many kilometres a week does {e} cover on foot?")}),
    R("sport", "kind", _pick(_SPORTS), {
        "train": ("{e} plays {v} on weekends.", "What sport does {e} play on weekends?"),
        "held-out": ("On Saturdays and Sundays {e} is out playing {v}.", "Which game fills the weekends of {e}?")}),
))
PRODUCT = Domain("product", lambda rng: f"{_coined(rng)} {rng.choice(('X2', 'Mini', 'Pro', '300', 'Lite', 'One'))}", (
    R("maker", "name", lambda rng: f"{_coined(rng)} Works", {"held-out-2": ("The {e} is built by {v}.", "Which company builds the {e}?")}),
    R("price", "number", _number(15, 2400), {"held-out-2": ("The {e} costs {v} dollars.", "How much does the {e} cost, in dollars?")}),
    R("launch", "year", _number(1990, 2026), {"held-out-2": ("The {e} came out in {v}.", "When did the {e} come out?")}),
    R("colour", "kind", _pick(_COLOURS), {"held-out-2": ("The {e} is only sold in {v}.", "What colour is the {e} sold in?")}),
    R("factory", "place", _pick(_PLACES), {"held-out-2": ("Every {e} is assembled in {v}.", "Where is the {e} assembled?")}),
    R("designer", "person", _person, {"held-out-2": ("{v} designed the {e}.", "Who designed the {e}?")}),
))
CLUB = Domain("club", lambda rng: f"the {_coined(rng)} {rng.choice(('Chess', 'Rowing', 'Choir', 'Chess', 'Cycling', 'Film'))} Club", (
    R("chair", "person", _person, {"held-out-2": ("{v} chairs {e}.", "Who chairs {e}?")}),
    R("members", "number", _number(8, 700), {"held-out-2": ("{e} counts {v} members.", "How many members does {e} have?")}),
    R("day", "time", _pick(_DAYS), {"held-out-2": ("{e} meets every {v}.", "On which day of the week does {e} meet?")}),
    R("venue", "place", _pick(_VENUES), {"held-out-2": ("{e} gathers at {v}.", "Where does {e} gather?")}),
    R("since", "year", _number(1880, 2020), {"held-out-2": ("{e} dates back to {v}.", "Since what year has {e} existed?")}),
    R("scarves", "kind", _pick(_COLOURS), {"held-out-2": ("The members of {e} wear {v} scarves.", "What colour are the scarves of the members of {e}?")}),
))

FAMILIES: dict[str, tuple[Domain, ...]] = {"train": (COMPANY, TOWN, PERSON), "held-out": (COMPANY, TOWN, PERSON), "held-out-2": (PRODUCT, CLUB)}


# -- sets and rows ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    domain: Domain
    entity: str
    relation: Relation
    value: str

    def document(self, family: str) -> str:
        return self.relation.templates[family][0].format(e=self.entity, v=self.value)

    def about(self) -> dict:
        """What a row records of the fact it asks (for breakdowns and the failure modes)."""
        return {"relation": f"{self.domain.name}.{self.relation.name}", "entity": self.entity, "answer_type": self.relation.answer_type}

    def question(self, family: str) -> str:
        q = self.relation.templates[family][1].format(e=self.entity)
        return q[0].upper() + q[1:]


def _entities_per_domain(docs: int, domains: Sequence[Domain]) -> int:
    """Enough entities of each domain that ``docs`` facts fit with a quarter to spare (the
    unstated facts the unanswerable questions ask)."""
    return max(2, -(-5 * docs // (4 * sum(len(d.relations) for d in domains))))


def draw_set(family: str, docs: int, rng: random.Random) -> tuple[list[Fact], list[Fact]]:
    """``docs`` stated facts and the facts left unstated (about the same entities), drawn from
    one to all of the family's domains; every value and entity distinct within the set, so
    exactly one document holds each answer."""
    domains = FAMILIES[family]
    used = rng.sample(domains, min(len(domains), 1 + docs // 24))
    per = _entities_per_domain(docs, used)
    facts: list[Fact] = []
    taken: set[str] = set()
    for domain in used:
        for _ in range(per):
            name = _fresh(domain.entity, rng, taken)
            facts += [Fact(domain, name, rel, _fresh(rel.value, rng, taken)) for rel in domain.relations]
    if len(facts) < docs + 1:
        raise DataError(f"cannot state {docs} facts of family {family!r} in one set; use fewer documents")
    rng.shuffle(facts)
    return facts[:docs], facts[docs:]


def _fresh(draw: Callable[[random.Random], str], rng: random.Random, taken: set[str]) -> str:
    """A value no other fact of the set holds or contains (nor is contained in)."""
    for _ in range(200):
        v = draw(rng)
        if all(v.lower() not in t.lower() and t.lower() not in v.lower() for t in taken):
            taken.add(v)
            return v
    raise DataError("ran out of distinct values for one set; use fewer documents")


def worlds(family: str = "held-out", docs: int = 8, n: int = 40, seed: int = 0, questions: int = 4, unanswerable: int = 1) -> list[dict]:
    """``n`` sets of ``docs`` documents, each asked ``questions`` answerable questions (about
    facts of different relations where the set allows) and ``unanswerable`` questions about
    its entities that no document answers; rows grouped by ``set``."""
    if family not in FAMILIES:
        raise DataError(f"unknown family {family!r}; choose one of: {', '.join(FAMILIES)}")
    rng = random.Random(f"worlds:{family}:{docs}:{seed}")
    rows = []
    for s in range(n):
        stated, unstated = draw_set(family, docs, rng)
        documents = [f.document(family) for f in stated]
        set_id = f"w-{family}-k{docs}-s{seed}-{s}"
        asked = _spread(stated, questions, rng)
        for j, fact in enumerate(asked):
            rows.append({"id": f"{set_id}-q{j}", "set": set_id, "documents": documents, "question": fact.question(family),
                         "answer": fact.value, "gold": stated.index(fact), **fact.about()})
        stated_entities = {f.entity for f in stated}
        for j, fact in enumerate([f for f in unstated if f.entity in stated_entities][:unanswerable]):
            rows.append({"id": f"{set_id}-u{j}", "set": set_id, "documents": documents, "question": fact.question(family),
                         "answer": None, "withheld": fact.value, **fact.about()})
    return rows


def _spread(stated: list[Fact], k: int, rng: random.Random) -> list[Fact]:
    """``k`` facts to ask, of as many different answer types as the set has (so one answer
    given to several questions is a reading's fault, never the data's)."""
    by_type: dict[str, list[Fact]] = {}
    for f in stated:
        by_type.setdefault(f.relation.answer_type, []).append(f)
    types = sorted(by_type)
    rng.shuffle(types)
    picked = [rng.choice(by_type[t]) for t in types[:k]]
    rest = [f for f in stated if f not in picked]
    return picked + rng.sample(rest, max(0, min(k - len(picked), len(rest))))


@dataclass
class WorldsConfig(GeneratorConfig):
    """``setllm data worlds``: natural sentences about fictional companies, towns, people,
    products and clubs; several questions per set of documents, one no document answers."""

    n: int = field(default=40, metadata={"help": "sets of documents (each asked --questions + --unanswerable questions)", "metavar": "N"})
    family: str = field(default="held-out", metadata={
        "help": "templates: train (training mixes); held-out (same domains, other words); held-out-2 (other domains)",
        "choices": list(FAMILIES)})
    docs: int = field(default=8, metadata={"help": "documents (facts) per set", "metavar": "K"})
    questions: int = field(default=4, metadata={"help": "answerable questions per set", "metavar": "Q"})
    unanswerable: int = field(default=1, metadata={"help": "questions per set that no document answers", "metavar": "U"})

    def check(self) -> None:
        at_least(docs=(self.docs, 2), questions=(self.questions, 1), unanswerable=(self.unanswerable, 0))
