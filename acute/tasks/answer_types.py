"""A small deterministic answer typer and the wrong-type answer assignment used by every task.

``answer_type(text)`` returns one of ``"number"``, ``"date"``, ``"person"``, ``"place"`` or
``"other"`` from surface heuristics and small gazetteers; it is meant to be cheap and reproducible,
not accurate on every entity. ``assign_wrong_types`` gives each example a *wrong-type answer*: the
gold answer of another example whose answer type differs (e.g. a year for a "who" question), drawn
with a fixed seed.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from typing import Callable, Hashable, Sequence

from .normalize import normalize_answer, parse_number

__all__ = ["ANSWER_TYPES", "answer_type", "assign_wrong_types", "same_type_answers"]

ANSWER_TYPES = ("number", "date", "person", "place", "other")

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december"
           "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_DATE_PATTERNS = [
    re.compile(r"^(?:in\s+|c\.\s*|circa\s+)?(?:1[0-9]{3}|20[0-9]{2})(?:\s*(?:ad|ce|bc|bce))?$"),
    re.compile(r"^(?:\d{1,4}\s*(?:ad|ce|bc|bce))$"),
    re.compile(r"^(?:the\s+)?(?:1[0-9]{3}|20[0-9]{2}|[1-9]0)'?s$"),  # 1960s, 60s
    re.compile(r"^(?:the\s+)?(?:\d{1,2}(?:st|nd|rd|th)|first|second|third|fourth|fifth|sixth|seventh"
               r"|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth"
               r"|seventeenth|eighteenth|nineteenth|twentieth|twenty-first)\s+century(?:\s+(?:bc|ad))?$"),
    re.compile(rf"^(?:\d{{1,2}}(?:st|nd|rd|th)?\s+)?(?:{_MONTHS})\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?)?"
               rf",?(?:\s+\d{{3,4}})?$"),
    re.compile(r"^\d{4}-\d{2}-\d{2}$"),
    re.compile(r"^\d{1,2}/\d{1,2}/\d{2,4}$"),
    re.compile(r"^(?:1[0-9]{3}|20[0-9]{2})\s*(?:-|\u2013|to)\s*(?:1[0-9]{3}|20[0-9]{2})$"),
    re.compile(r"^(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)$"),
]
_NUMBER_UNIT = re.compile(r"^[-+$]?\d[\d,]*(?:\.\d+)?\s*(?:%|[a-z\u00b0\u00b5/²³]+\.?)?(?:\s+[a-z]+)?$")

_COUNTRIES = """afghanistan albania algeria andorra angola argentina armenia australia austria azerbaijan
bahamas bahrain bangladesh barbados belarus belgium belize benin bhutan bolivia bosnia botswana brazil
brunei bulgaria burkina burundi cambodia cameroon canada chad chile china colombia comoros congo
croatia cuba cyprus czechia czechoslovakia denmark djibouti dominica ecuador egypt eritrea estonia
eswatini ethiopia fiji finland france gabon gambia georgia germany ghana greece grenada guatemala guinea
guyana haiti honduras hungary iceland india indonesia iran iraq ireland israel italy jamaica japan
jordan kazakhstan kenya kiribati korea kosovo kuwait kyrgyzstan laos latvia lebanon lesotho liberia
libya liechtenstein lithuania luxembourg madagascar malawi malaysia maldives mali malta mauritania
mauritius mexico micronesia moldova monaco mongolia montenegro morocco mozambique myanmar burma namibia
nauru nepal netherlands holland nicaragua niger nigeria norway oman pakistan palau palestine panama
paraguay peru philippines poland portugal qatar romania russia rwanda samoa senegal serbia seychelles
singapore slovakia slovenia somalia spain sudan suriname sweden switzerland syria taiwan tajikistan
tanzania thailand togo tonga tunisia turkey turkmenistan tuvalu uganda ukraine uruguay uzbekistan
vanuatu venezuela vietnam yemen zambia zimbabwe england scotland wales britain usa uk america prussia
persia tibet greenland siam rhodesia yugoslavia ussr zaire ceylon""".split()
_PLACES_MULTI = {
    "united states", "united kingdom", "great britain", "new zealand", "south africa", "north korea",
    "south korea", "saudi arabia", "sri lanka", "costa rica", "el salvador", "ivory coast",
    "sierra leone", "papua new guinea", "united arab emirates", "czech republic", "soviet union",
    "dominican republic", "new york", "new york city", "los angeles", "san francisco", "hong kong",
    "rio de janeiro", "buenos aires", "mexico city", "new delhi", "cape town", "tel aviv",
    "las vegas", "new orleans", "new jersey", "new mexico", "new hampshire", "north carolina",
    "south carolina", "north dakota", "south dakota", "west virginia", "rhode island",
    "northern ireland", "north america", "south america", "latin america", "middle east",
    "pacific ocean", "atlantic ocean", "indian ocean", "arctic ocean", "southern ocean",
    "mediterranean sea", "north sea", "red sea", "black sea", "dead sea", "caribbean sea",
    "washington dc", "washington d c", "st petersburg", "saint petersburg", "abu dhabi", "kuala lumpur",
    "sub saharan africa", "east africa", "west africa", "north africa", "southeast asia",
}
_PLACES_SINGLE = set(_COUNTRIES) | set("""
africa asia europe antarctica oceania australasia arctic antarctic eurasia scandinavia balkans
caribbean siberia sahara amazon nile thames danube rhine mississippi ganges yangtze volga himalayas
alps andes rockies everest kilimanjaro atlantis hawaii alaska california texas florida ohio oregon
nevada arizona utah colorado kansas iowa illinois indiana michigan wisconsin minnesota missouri
kentucky tennessee alabama mississippi louisiana arkansas oklahoma georgia virginia maryland delaware
pennsylvania massachusetts connecticut vermont maine montana wyoming idaho washington nebraska
london paris berlin rome madrid lisbon dublin edinburgh glasgow manchester liverpool birmingham
leeds oxford cambridge bristol york brussels amsterdam rotterdam vienna prague budapest warsaw
moscow athens istanbul ankara cairo beijing shanghai tokyo kyoto osaka seoul delhi mumbai bombay
calcutta kolkata bangkok jakarta manila sydney melbourne perth brisbane toronto montreal vancouver
ottawa quebec chicago boston philadelphia detroit houston dallas seattle miami atlanta denver
baltimore pittsburgh cleveland lagos nairobi johannesburg casablanca tehran baghdad jerusalem
mecca damascus beirut dubai karachi lahore kabul havana lima santiago bogota caracas geneva zurich
stockholm oslo copenhagen helsinki reykjavik venice florence milan naples munich hamburg frankfurt
marseille lyon barcelona seville hollywood manhattan brooklyn gibraltar sicily sardinia corsica
crete cyprus bali tasmania madagascar borneo sumatra java iceland ireland malta jersey guernsey
normandy bavaria tuscany provence catalonia kent yorkshire cornwall devon wessex hanoi saigon
singapore shenzhen canton rangoon yangon""".split())
_PLACE_WORDS = re.compile(
    r"\b(?:river|mount|mountains?|lake|sea|ocean|island|islands|isle|bay|gulf|strait|desert|valley|"
    r"city|county|province|state|republic|kingdom|empire|peninsula|canal|falls|park|street|square|"
    r"abbey|cathedral|castle|palace|tower|bridge|airport|station|coast|channel|cape|harbour|harbor|"
    r"forest|hills?|town|village|capital)\b")

_FIRST_NAMES = set("""
aaron adam adolf agatha albert alexander alfred alice amelia andrew angela ann anna anne anthony
arthur barack benjamin bernard betty bill billy bob brian bruce carl carlos caroline catherine
charles charlotte christopher claude clint daniel david diana donald dorothy douglas edgar edith
edmund edward eleanor elizabeth ella elton elvis emily emma eric ernest eva frank franklin fred
frederick george georgia gordon grace harold harriet harry helen henry howard hugh isaac isabella
jack jacob james jane janet jean jennifer jessica jim jimmy joan joe john johnny jonathan joseph
judy julia julius karl kate katherine keith kevin larry laura lee leo leonard leonardo lewis linda
louis louise lucy ludwig margaret maria marie mark martin mary matthew michael mick nancy napoleon
neil nelson nicholas oliver oscar patrick paul peter philip queen rachel ralph raymond richard
robert roger ronald rose roy ruth sally samuel sarah simon sophia stephen steve steven susan thomas
tim timothy tom tony victoria vincent virginia walter wilhelm will william winston wolfgang ringo
goldie marilyn audrey greta humphrey cary clark marlon bette meryl kirk burt dustin
""".split())
_PERSON_TITLES = re.compile(
    r"^(?:mr|mrs|ms|miss|dr|sir|dame|lord|lady|king|queen|prince|princess|saint|st|pope|president|"
    r"general|captain|admiral|emperor|empress|professor|prof|rev|reverend|chancellor|senator|"
    r"bishop|archbishop|duke|duchess|count|countess|baron|tsar|czar|sultan|pharaoh)\b\.?\s+\S")
_INITIALS = re.compile(r"^(?:[A-Z]\.\s*){1,3}[A-Z][a-z]+")


def _is_date(low: str) -> bool:
    return any(p.match(low) for p in _DATE_PATTERNS)


def _is_number(low: str) -> bool:
    if parse_number(low) is not None:
        return True
    return bool(_NUMBER_UNIT.match(low)) and len(low.split()) <= 3


def _is_place(low: str, norm: str) -> bool:
    if norm in _PLACES_MULTI or norm in _PLACES_SINGLE:
        return True
    words = norm.split()
    if len(words) <= 4 and words and (words[-1] in _PLACES_SINGLE or " ".join(words[-2:]) in _PLACES_MULTI):
        # "Paris, France", "northern Italy"
        return all(w[:1].isalpha() for w in words)
    return bool(_PLACE_WORDS.search(norm)) and len(words) <= 5


def _is_person(text: str, norm: str) -> bool:
    if text.isupper():  # "GOLDIE HAWN"
        text = text.title()
    if _PERSON_TITLES.match(text.lower()) or _INITIALS.match(text):
        return True
    tokens = text.replace(",", " ").split()
    if not 2 <= len(tokens) <= 4:
        return False
    if not all(t[:1].isupper() for t in tokens if t.lower() not in {"de", "van", "von", "da", "of", "la", "le", "del"}):
        return False
    return norm.split()[0] in _FIRST_NAMES


def answer_type(text: str) -> str:
    """Return the coarse type of an answer string: number, date, person, place or other.

    Order of checks: date (years, decades, centuries, month/day forms) before number (so ``"1867"``
    is a date), then place (gazetteer of countries, regions, large cities and words such as
    *river*/*mount*), then person (titles, initials, or 2-4 capitalised words starting with a common
    first name). Empty text is ``"other"``. Deterministic and case-insensitive where it matters.
    """
    text = " ".join(str(text).split()).strip().rstrip(".")
    if not text:
        return "other"
    low = text.lower()
    norm = normalize_answer(text)
    if _is_date(low):
        return "date"
    if _is_number(low):
        return "number"
    if _is_person(text, norm):
        return "person"
    if _is_place(low, norm):
        return "place"
    return "other"


def _default_text(ex) -> str:
    return ex.answers[0] if ex.answers else ""


def assign_wrong_types(
    examples: Sequence,
    seed: int = 0,
    *,
    text_of: Callable | None = None,
    type_of: Callable[[object], Hashable] | None = None,
    differs: Callable[[object, object], bool] | None = None,
    accept: Callable[[object, str], bool] | None = None,
) -> list:
    """Return copies of ``examples`` with ``wrong_type`` set to another example's answer of another type.

    For each example, the candidates are the answer texts (``text_of(other)``, default
    ``other.answers[0]``) of every *other* example whose type (``type_of``, default
    :func:`answer_type` of ``text_of``) differs from its own -- or, when ``differs(ex, other)`` is
    given, for which it returns True -- excluding texts that normalise to one of the example's own
    gold answers and, when ``accept(ex, text)`` is given, texts it rejects (tasks pass "is labelled
    wrong", so a wrong-type answer is never graded correct). One candidate is drawn with ``random.Random(f"{seed}:{ex.id}")``, so the choice
    depends only on the seed, the example's id and the set of examples (candidates are ordered by
    id), never on the input order or hash seeds. ``wrong_type`` is ``None`` when there is no candidate (e.g. every answer has the
    same type). The default ``type_of`` uses a valid ``meta["answer_type"]`` already present (e.g.
    from the data file). The example's type is recorded in ``meta["answer_type"]`` (when ``type_of``
    returns a string). Examples whose ``wrong_type`` is already set are kept unchanged.
    """
    text_of = text_of or _default_text
    if type_of is None:
        def type_of(ex):  # a valid type recorded in the data wins over the typer
            given = (ex.meta or {}).get("answer_type")
            return given if given in ANSWER_TYPES else answer_type(text_of(ex))
    texts = [text_of(ex) for ex in examples]
    norms = [normalize_answer(t) if t else "" for t in texts]
    types = [type_of(ex) for ex in examples]
    # Deduplicated answer texts per type, in first-seen order: (text, normalised text).
    by_type: dict[Hashable, list[tuple[str, str]]] = {}
    first_seen: dict[tuple[Hashable, str], int] = {}
    order = sorted(range(len(examples)), key=lambda i: str(examples[i].id))  # input order is irrelevant
    for i in order:
        t, n, ty = texts[i], norms[i], types[i]
        if t and (ty, t) not in first_seen:
            first_seen[(ty, t)] = i
            by_type.setdefault(ty, []).append((t, n))
    out = []
    for i, ex in enumerate(examples):
        meta = dict(ex.meta or {})
        if isinstance(types[i], str):
            meta["answer_type"] = types[i]
        if ex.wrong_type is not None:
            out.append(replace(ex, meta=meta))
            continue
        gold = {normalize_answer(a) for a in ex.answers}
        rng = random.Random(f"{seed}:{ex.id}")
        ok = (lambda text, ex=ex: accept(ex, text)) if accept is not None else (lambda text: True)
        if differs is None:
            wrong = _draw_other_type(by_type, types[i], gold, rng, ok)
        else:
            pool = [j for j in order if j != i and differs(ex, examples[j])]
            seen: set[str] = set()
            candidates = []
            for j in pool:
                if texts[j] and texts[j] not in seen and norms[j] not in gold:
                    seen.add(texts[j])
                    candidates.append(texts[j])
            rng.shuffle(candidates)  # then the first one ``accept`` allows
            wrong = next((t for t in candidates if ok(t)), None)
        out.append(replace(ex, wrong_type=wrong, meta=meta))
    return out


def _draw_other_type(by_type: dict, own_type: Hashable, gold: set[str], rng: random.Random,
                     ok: Callable[[str], bool]) -> str | None:
    """Draw uniformly among the texts of every type but ``own_type`` whose normal form is not gold
    and that ``ok`` accepts."""
    groups = [g for t, g in by_type.items() if t != own_type]
    total = sum(len(g) for g in groups)
    if total == 0:
        return None
    for _ in range(32):  # rejection sampling: gold collisions are rare
        k = rng.randrange(total)
        for g in groups:
            if k < len(g):
                text, norm = g[k]
                break
            k -= len(g)
        if norm not in gold and ok(text):
            return text
    candidates = [t for g in groups for t, n in g if n not in gold and ok(t)]
    return rng.choice(candidates) if candidates else None


_STOP = set("""what which who whom whose where when why how was were is are the and for from with
that this these those into onto of in on at by to as an a its it his her their they he she you your
name named called famous first known one two also did does do has have had be been being than then
there what's which's""".split())


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", str(text).lower()) if len(w) > 2 and w not in _STOP}


def same_type_answers(
    examples: Sequence,
    seed: int = 0,
    *,
    text_of: Callable | None = None,
    accept: Callable[[object, str], bool] | None = None,
) -> list[str | None]:
    """For each example, another example's answer text *of the same type*, preferring the example
    whose question is most similar (a plausible wrong answer for benchmarks that list none: an
    animal for "what type of animal", a person for "who").

    Similarity = sum over shared question content words of 1 / (number of questions holding the
    word). Candidates exclude the example's own gold answers and texts ``accept(ex, text)``
    rejects; the type is a valid ``meta["answer_type"]`` or :func:`answer_type`. Ties and rows
    with no similar question are resolved with ``random.Random(f"same:{seed}:{ex.id}")`` over
    candidates ordered by id. Returns one entry (``None`` when there is no candidate) per example,
    in input order.
    """
    text_of = text_of or _default_text

    def type_of(ex):
        given = (ex.meta or {}).get("answer_type")
        return given if given in ANSWER_TYPES else answer_type(text_of(ex))

    n = len(examples)
    order = sorted(range(n), key=lambda i: str(examples[i].id))
    rank = {i: r for r, i in enumerate(order)}
    types = [type_of(ex) for ex in examples]
    texts = [text_of(ex) for ex in examples]
    norms = [normalize_answer(t) if t else "" for t in texts]
    words = [_content_words(ex.question) for ex in examples]
    index: dict[tuple[str, str], list[int]] = {}
    for i in order:
        for w in words[i]:
            index.setdefault((types[i], w), []).append(i)
    df: dict[str, int] = {}
    for ws in words:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    by_type: dict[str, list[tuple[str, str]]] = {}
    seen: set[tuple[str, str]] = set()
    for i in order:
        if texts[i] and (types[i], texts[i]) not in seen:
            seen.add((types[i], texts[i]))
            by_type.setdefault(types[i], []).append((texts[i], norms[i]))
    out: list[str | None] = []
    for i, ex in enumerate(examples):
        gold = {normalize_answer(a) for a in ex.answers}
        ok = (lambda text, ex=ex: accept(ex, text)) if accept is not None else (lambda text: True)
        rng = random.Random(f"same:{seed}:{ex.id}")
        scores: dict[int, float] = {}
        for w in words[i]:
            for j in index.get((types[i], w), ()):
                if j != i:
                    scores[j] = scores.get(j, 0.0) + 1.0 / df[w]
        tiebreak = {j: rng.random() for j in sorted(scores, key=rank.get)}
        choice = None
        for j in sorted(scores, key=lambda j: (-scores[j], tiebreak[j])):
            if texts[j] and norms[j] not in gold and ok(texts[j]):
                choice = texts[j]
                break
        if choice is None:
            choice = _draw_other_type({types[i]: by_type.get(types[i], [])}, None, gold, rng, ok)
        out.append(choice)
    return out
