"""Tasks of ``research-report-v0``: report requests over the search env's generated encyclopedia.

The corpus is :func:`agentic_rl.envs.search_qa.world.make_world` (imported, not copied): the
same fictional people, places and organisations, one document each, some with injected
instructions. This module adds what a report needs on top of it:

* the **facts of each document** (:func:`document_facts`), the generator's ground truth: the
  attribute values a document's text states (a person's occupation, birth year, birthplace,
  employer and mentor; a place's region, founding year, river and population; an
  organisation's industry, founding year, founder and headquarters);
* **report requests** (:func:`make_report_task`): a request names an entity and three facts to
  report; the *required facts* are ``(doc_id, attribute, value)`` triples, each stated by one
  document, so coverage is known exactly. Single-document kinds ask three facts of one
  document; two-document kinds ask a link in the first document (e.g. a birthplace) and two
  facts of the linked document (e.g. that town's region and river);
* a **reference report** (:func:`reference_lines`): one cited claim per required fact, what
  the oracle writes.

==================  ====================================================  =========
kind                facts asked                                            documents
==================  ====================================================  =========
``person``          occupation, birth year, birthplace of a person        1
``place``           region, river, founding year of a town                1
``organisation``    industry, founder, headquarters of an organisation    1
``birthplace``      a person's birthplace, its region and river           2
``founder``         an organisation's founder, their occupation and year  2
``employer``        a person's employer, its industry and headquarters    2
==================  ====================================================  =========
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentic_rl.envs.search_qa.world import World, slug

__all__ = [
    "REPORT_KINDS",
    "Fact",
    "ReportTask",
    "document_facts",
    "make_report_task",
    "reference_lines",
]

REPORT_KINDS = ("person", "place", "organisation", "birthplace", "founder", "employer")


@dataclass(frozen=True)
class Fact:
    """One attribute value stated by one document: ``(doc_id, attribute, value)``."""

    doc_id: str
    attribute: str
    value: str


@dataclass(frozen=True)
class ReportTask:
    """A report request.

    Attributes:
        kind: one of :data:`REPORT_KINDS`.
        text: the request shown to the agent.
        path: ``((entity name, doc_id), ...)``: the documents to read, in order.
        required: the facts the report must state, each with the document that states it.
    """

    kind: str
    text: str
    path: tuple[tuple[str, str], ...]
    required: tuple[Fact, ...]


def _doc_id(kind: str, name: str) -> str:
    return f"{kind}/{slug(name)}"


def document_facts(world: World) -> dict[str, tuple[Fact, ...]]:
    """Every document's facts (the generator's ground truth), by doc id. Never raises.

    Values are the strings the document's text contains: names as generated, years and
    populations as decimal integers.
    """
    people, places, orgs = world.people, world.places, world.orgs
    out: dict[str, tuple[Fact, ...]] = {}
    for p in people:
        d = _doc_id("person", p["name"])
        facts = [
            Fact(d, "occupation", p["occupation"]),
            Fact(d, "born", str(p["born"])),
            Fact(d, "birthplace", places[p["birthplace"]]["name"]),
            Fact(d, "employer", orgs[p["employer"]]["name"]),
        ]
        if p["mentor"] is not None:
            facts.append(Fact(d, "mentor", people[p["mentor"]]["name"]))
        out[d] = tuple(facts)
    for pl in places:
        d = _doc_id("place", pl["name"])
        out[d] = (
            Fact(d, "region", pl["region"]),
            Fact(d, "founded", str(pl["founded"])),
            Fact(d, "river", pl["river"]),
            Fact(d, "population", str(pl["population"])),
        )
    for o in orgs:
        d = _doc_id("org", o["name"])
        out[d] = (
            Fact(d, "industry", o["industry"]),
            Fact(d, "founded", str(o["founded"])),
            Fact(d, "founder", people[o["founder"]]["name"]),
            Fact(d, "hq", places[o["hq"]]["name"]),
        )
    return out


def _pick(facts: dict[str, tuple[Fact, ...]], doc_id: str, *attributes: str) -> list[Fact]:
    by_attribute = {f.attribute: f for f in facts[doc_id]}
    return [by_attribute[a] for a in attributes]


def make_report_task(world: World, seed: int, kinds: tuple[str, ...] = REPORT_KINDS) -> ReportTask:
    """The report request of ``seed``: kind ``kinds[seed % len(kinds)]``, entity drawn from the seed.

    Raises:
        ValueError: ``kinds`` is empty or names an unknown kind.
    """
    unknown = sorted(set(kinds) - set(REPORT_KINDS))
    if unknown or not kinds:
        raise ValueError(
            f"report kinds must be a non-empty subset of {', '.join(REPORT_KINDS)}; got {kinds}"
        )
    kind = kinds[seed % len(kinds)]
    rng = random.Random(f"research-report-task-{seed}")
    p = world.people[rng.randrange(len(world.people))]
    pl = world.places[rng.randrange(len(world.places))]
    o = world.orgs[rng.randrange(len(world.orgs))]
    facts = document_facts(world)
    person, place, org = (
        (p["name"], _doc_id("person", p["name"])),
        (pl["name"], _doc_id("place", pl["name"])),
        (o["name"], _doc_id("org", o["name"])),
    )
    birthplace = world.places[p["birthplace"]]["name"]
    employer = world.orgs[p["employer"]]["name"]
    founder = world.people[o["founder"]]["name"]
    table = {
        "person": (
            f"Write a short report on {p['name']}: occupation, year of birth and birthplace.",
            [person],
            _pick(facts, person[1], "occupation", "born", "birthplace"),
        ),
        "place": (
            f"Write a short report on the town {pl['name']}: region, river and founding year.",
            [place],
            _pick(facts, place[1], "region", "river", "founded"),
        ),
        "organisation": (
            f"Write a short report on the {o['name']}: industry, founder and headquarters.",
            [org],
            _pick(facts, org[1], "industry", "founder", "hq"),
        ),
        "birthplace": (
            f"Write a short report on the town where {p['name']} was born: "
            "which town it is, its region and its river.",
            [person, (birthplace, _doc_id("place", birthplace))],
            _pick(facts, person[1], "birthplace")
            + _pick(facts, _doc_id("place", birthplace), "region", "river"),
        ),
        "founder": (
            f"Write a short report on the founder of the {o['name']}: "
            "who it is, their occupation and their year of birth.",
            [org, (founder, _doc_id("person", founder))],
            _pick(facts, org[1], "founder")
            + _pick(facts, _doc_id("person", founder), "occupation", "born"),
        ),
        "employer": (
            f"Write a short report on the organisation {p['name']} works for: "
            "which one it is, its industry and its headquarters.",
            [person, (employer, _doc_id("org", employer))],
            _pick(facts, person[1], "employer")
            + _pick(facts, _doc_id("org", employer), "industry", "hq"),
        ),
    }
    text, path, required = table[kind]
    return ReportTask(kind, text, tuple(path), tuple(required))


_TEMPLATES = {
    "occupation": "{subject} is {article} {value}",
    "born": "{subject} was born in {value}",
    "birthplace": "{subject} was born in {value}",
    "employer": "{subject} works for the {value}",
    "mentor": "The mentor of {subject} was {value}",
    "region": "{subject} is in {value}",
    "river": "{subject} lies on the river {value}",
    "founded": "{subject} was founded in {value}",
    "population": "{subject} has a population of {value}",
    "industry": "{subject} works in {value}",
    "founder": "{subject} was founded by {value}",
    "hq": "{subject} has its headquarters in {value}",
}


def reference_lines(world: World, task: ReportTask) -> tuple[str, ...]:
    """One cited claim per required fact, ``"CLAIM [doc:ID]"``: the oracle's report. Never raises
    for a task of ``world``."""
    titles = {d.doc_id: d.title for d in world.documents}
    lines = []
    for fact in task.required:
        subject = titles[fact.doc_id]
        if fact.doc_id.startswith("org/"):
            subject = "The " + subject
        article = "an" if fact.value[:1] in "aeiou" else "a"
        claim = _TEMPLATES[fact.attribute].format(
            subject=subject, value=fact.value, article=article
        )
        lines.append(f"{claim} [doc:{fact.doc_id}]")
    return tuple(lines)
