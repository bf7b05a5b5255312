"""A seeded synthetic world: fictional entities, their encyclopedia passages, multi-hop questions.

Entities. People, cities, companies and universities; each split ("train", "test") has its own
entities (`WorldConfig` counts per split), and relations only point within a split, so train and
test questions share no entity. Every name is made here, so no model has seen the facts before.
An entity has attributes (years, an occupation, an industry, a country) and one value for each
relation: a person's birthplace, employer and alma mater; a city's mayor; a company's founder and
headquarters; a university's city and president. Its passage (id `world/{split}/{kind}/{index}`)
states all of them and nothing else.

Names. Each entity has its own core word: its number in the world (split, kind, index) goes
through a seeded bijection of [0, 70^L), g -> (a*g + b) mod 70^L with a coprime to 70, and is
written as L consonant-vowel syllables (70 of them). Syllables of two letters make a spelling
decode uniquely, so different entities never share a core word; people add a first name of two
syllables (shared among people, and never equal to a core word, which has at least three).

Laziness. Entity (split, kind, i) is drawn from `random.Random(f"{seed}:{split}:{kind}:{i}")`
(Python hashes string seeds with SHA-512: the same in every process) and question (split, i) from
its own generator, so nothing is stored: a world of millions of passages costs nothing until read,
and `passages` streams them. Everything is a function of (config, split, index).

Questions. A start entity, a chain of relations through distinct entities, and a last hop that
asks a relation or an attribute: `min_hops` to `max_hops` hops. `answer_relations` limits what
the last hop may ask (relation names; empty: anything): ("occupation", "industry", "country")
gives questions whose answers come from closed vocabularies (15 occupations, 10 industries, the
world's countries), a tier whose answers a model that cannot copy a name can still learn. The
question nests the chain as noun phrases ("In what year was the employer of the mayor of Kavoru
founded?"); each hop's sub-question names the previous hop's answer ("Who is the mayor of
Kavoru?") and is supported by the passage of the entity it asks about.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from seetjax.envs.qa_search.corpus import Hop, Passage, QATask
from seetjax.errors import invalid, require, require_int

SPLITS = ("train", "test")
KINDS = ("person", "city", "company", "university")
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")
_OCCUPATIONS = ("architect", "chemist", "painter", "surgeon", "engineer", "historian", "composer",
                "journalist", "botanist", "economist", "sculptor", "astronomer", "lawyer", "pilot",
                "novelist")
_INDUSTRIES = ("shipping", "textile", "software", "mining", "publishing", "aviation",
               "agriculture", "brewing", "robotics", "insurance")
_COMPANY_SUFFIXES = ("Industries", "Holdings", "Works", "Labs", "Group", "Systems")
_MAX_WALKS = 100


@dataclass(frozen=True)
class Relation:
    """A fact about an entity of kind `subject`: a link to an entity of kind `target`, or an
    attribute (`target` None). `question` asks it of "{x}"; `phrase` names the linked entity
    inside a longer question."""

    subject: str
    name: str
    target: str | None
    question: str
    phrase: str = ""


RELATIONS = (
    Relation("person", "born_in", "city", "In which city was {x} born?", "the birthplace of {x}"),
    Relation("person", "works_for", "company", "Which company does {x} work for?",
             "the employer of {x}"),
    Relation("person", "studied_at", "university", "Which university did {x} attend?",
             "the alma mater of {x}"),
    Relation("person", "birth_year", None, "In what year was {x} born?"),
    Relation("person", "occupation", None, "What is the occupation of {x}?"),
    Relation("city", "mayor", "person", "Who is the mayor of {x}?", "the mayor of {x}"),
    Relation("city", "country", None, "In which country is {x}?"),
    Relation("city", "founded", None, "In what year was {x} founded?"),
    Relation("company", "founder", "person", "Who founded {x}?", "the founder of {x}"),
    Relation("company", "headquarters", "city", "In which city is {x} headquartered?",
             "the headquarters city of {x}"),
    Relation("company", "founded", None, "In what year was {x} founded?"),
    Relation("company", "industry", None, "In which industry does {x} operate?"),
    Relation("university", "located_in", "city", "In which city is {x} located?",
             "the home city of {x}"),
    Relation("university", "president", "person", "Who is the president of {x}?",
             "the president of {x}"),
    Relation("university", "founded", None, "In what year was {x} founded?"),
)
_BY_KIND = {kind: tuple(r for r in RELATIONS if r.subject == kind) for kind in KINDS}
_RELATION = {(r.subject, r.name): r for r in RELATIONS}


@dataclass(frozen=True)
class WorldConfig:
    """Entity counts per split (each split has its own), countries (shared: they are attribute
    values, not entities questions start from or pass through), and the hop range."""

    seed: int = 0
    people: int = 120
    cities: int = 30
    companies: int = 40
    universities: int = 10
    countries: int = 12
    min_hops: int = 1
    max_hops: int = 4
    answer_relations: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("people", "cities", "companies", "universities", "countries"):
            require_int(self, name, getattr(self, name), 2)
        require(1 <= self.min_hops <= 4, self, "min_hops", self.min_hops, "must be in [1, 4]")
        require(self.min_hops <= self.max_hops <= 4, self, "max_hops", self.max_hops,
                f"must be in [min_hops={self.min_hops}, 4]")
        unknown = sorted(set(self.answer_relations) - {r.name for r in RELATIONS})
        if unknown:
            raise invalid(self, "answer_relations", self.answer_relations, f"unknown {unknown}; known: "
                             f"{sorted({r.name for r in RELATIONS})}")

    @classmethod
    def sized(cls, passages_per_split: int, **fields: Any) -> WorldConfig:
        """A world of at least `passages_per_split` passages per split (exactly as many from 20
        on): half people, a quarter companies, 15% cities, universities the rest (~10%)."""
        n = passages_per_split
        people, companies, cities = max(2, n // 2), max(2, n // 4), max(2, n * 15 // 100)
        return cls(people=people, companies=companies, cities=cities,
                   universities=max(2, n - people - companies - cities), **fields)

    def count(self, kind: str) -> int:
        return {"person": self.people, "city": self.cities, "company": self.companies,
                "university": self.universities}[kind]

    @property
    def per_split(self) -> int:
        """Entities (= passages) in each split."""
        return sum(self.count(kind) for kind in KINDS)


@dataclass(frozen=True)
class Entity:
    """One entity: `facts` maps each relation of its kind to a value (a target's index within the
    split for links, the value itself for attributes)."""

    split: str
    kind: str
    index: int
    name: str
    aliases: tuple[str, ...]
    facts: dict[str, int | str]

    @property
    def id(self) -> str:
        return passage_id(self.split, self.kind, self.index)


def passage_id(split: str, kind: str, index: int) -> str:
    return f"world/{split}/{kind}/{index}"


class World:
    """The world of one `WorldConfig` (see the module docstring)."""

    def __init__(self, config: WorldConfig | None = None):
        self.config = config or WorldConfig()
        self._name_length = max(3, _syllables_needed(self._names_needed))
        capacity = len(_SYLLABLES) ** self._name_length
        rng = random.Random(f"{self.config.seed}:names")
        self._multiplier = rng.randrange(1, capacity)
        while math.gcd(self._multiplier, len(_SYLLABLES)) != 1:
            self._multiplier = rng.randrange(1, capacity)
        self._offset = rng.randrange(capacity)
        self._capacity = capacity

    # ------------------------------------------------------------------ entities

    @property
    def _names_needed(self) -> int:
        return len(SPLITS) * self.config.per_split + self.config.countries

    def _core(self, number: int) -> str:
        """The core word of name number `number` (distinct numbers, distinct words)."""
        code = (self._multiplier * number + self._offset) % self._capacity
        syllables = []
        for _ in range(self._name_length):
            code, digit = divmod(code, len(_SYLLABLES))
            syllables.append(_SYLLABLES[digit])
        return "".join(syllables).capitalize()

    def _number(self, split: str, kind: str, index: int) -> int:
        _check_split(split)
        count = self.config.count(kind)
        if not 0 <= index < count:
            raise IndexError(f"{kind} {index} of split {split!r}: the world has {count}")
        before = sum(self.config.count(k) for k in KINDS[:KINDS.index(kind)])
        return SPLITS.index(split) * self.config.per_split + before + index

    def country(self, index: int) -> str:
        return self._core(len(SPLITS) * self.config.per_split + index)

    def _name(self, split: str, kind: str, index: int, rng: random.Random
              ) -> tuple[str, tuple[str, ...]]:
        core = self._core(self._number(split, kind, index))
        if kind == "person":
            first = (rng.choice(_SYLLABLES) + rng.choice(_SYLLABLES)).capitalize()
            return f"{first} {core}", (core,)
        if kind == "company":
            return f"{core} {rng.choice(_COMPANY_SUFFIXES)}", (core,)
        if kind == "university":
            return f"{core} University", (f"University of {core}", core)
        return core, ()

    def entity(self, split: str, kind: str, index: int) -> Entity:
        """Entity `index` of `kind` in `split`, drawn from its own seeded generator."""
        rng = random.Random(f"{self.config.seed}:{split}:{kind}:{index}")
        name, aliases = self._name(split, kind, index, rng)
        facts: dict[str, int | str] = {}
        for relation in _BY_KIND[kind]:
            if relation.target is not None:
                facts[relation.name] = rng.randrange(self.config.count(relation.target))
        if kind == "person":
            facts["birth_year"] = rng.randint(1900, 1999)
            facts["occupation"] = rng.choice(_OCCUPATIONS)
        elif kind == "city":
            facts["country"] = self.country(rng.randrange(self.config.countries))
            facts["founded"] = rng.randint(1000, 1899)
        elif kind == "company":
            facts["founded"] = rng.randint(1850, 2015)
            facts["industry"] = rng.choice(_INDUSTRIES)
        else:
            facts["founded"] = rng.randint(1300, 1990)
        return Entity(split, kind, index, name, aliases, facts)

    def linked(self, entity: Entity, relation: Relation) -> Entity:
        """The entity `relation` (a link) points to from `entity`."""
        assert relation.target is not None
        return self.entity(entity.split, relation.target, int(entity.facts[relation.name]))

    def answer(self, entity: Entity, relation: Relation) -> tuple[str, ...]:
        """The value of `relation` for `entity`: the canonical text, then its aliases."""
        if relation.target is None:
            return (str(entity.facts[relation.name]),)
        target = self.linked(entity, relation)
        return (target.name, *target.aliases)

    # ------------------------------------------------------------------ passages

    def passage(self, entity: Entity) -> Passage:
        """The encyclopedia passage of `entity`: every fact of it, in a sentence or two."""
        f, name = entity.facts, entity.name

        def link(relation: str) -> str:
            return self.linked(entity, _RELATION[entity.kind, relation]).name

        if entity.kind == "person":
            text = (f"{name} is {_a(str(f['occupation']))} born in {f['birth_year']} in "
                    f"{link('born_in')}. {name} studied at {link('studied_at')} and works for "
                    f"{link('works_for')}.")
        elif entity.kind == "city":
            text = (f"{name} is a city in {f['country']}, founded in {f['founded']}. The mayor of "
                    f"{name} is {link('mayor')}.")
        elif entity.kind == "company":
            text = (f"{name} is {_a(str(f['industry']))} company founded in {f['founded']} by "
                    f"{link('founder')}. {name} is headquartered in {link('headquarters')}.")
        else:
            text = (f"{name} is a university in {link('located_in')}, founded in {f['founded']}. "
                    f"The president of {name} is {link('president')}.")
        return Passage(entity.id, name, text, source=f"synthetic world, seed {self.config.seed}")

    def passages(self, splits: Sequence[str] = SPLITS) -> Iterator[Passage]:
        """Every passage of `splits`, kind by kind, streamed."""
        for split in splits:
            for kind in KINDS:
                for index in range(self.config.count(kind)):
                    yield self.passage(self.entity(split, kind, index))

    def num_passages(self, splits: Sequence[str] = SPLITS) -> int:
        for split in splits:
            _check_split(split)
        return len(splits) * self.config.per_split

    # ------------------------------------------------------------------ questions

    def question(self, split: str, index: int) -> QATask:
        """Question `index` of `split` (any index >= 0; see the module docstring)."""
        _check_split(split)
        if index < 0:
            raise IndexError(f"question index {index} must be >= 0")
        rng = random.Random(f"{self.config.seed}:{split}:question:{index}")
        hops = rng.randint(self.config.min_hops, self.config.max_hops)
        for _ in range(_MAX_WALKS):
            chain = self._walk(split, hops, rng)
            if chain is not None:
                break
        else:  # pragma: no cover - needs a world whose links all loop back within `hops`
            raise RuntimeError(f"no {hops}-hop chain through distinct entities ending in one of "
                               f"answer_relations={self.config.answer_relations or 'any'} for "
                               f"question {index} of {split!r}")
        phrase = chain[0][0].name
        for _, relation in chain[:-1]:
            phrase = relation.phrase.format(x=phrase)
        last_entity, last = chain[-1]
        task_hops = tuple(Hop(relation.question.format(x=entity.name),
                              self.answer(entity, relation)[0], (entity.id,))
                          for entity, relation in chain)
        return QATask(id=f"world-{self.config.seed}/{split}/{index}",
                      question=last.question.format(x=phrase),
                      answers=self.answer(last_entity, last), hops=task_hops, split=split)

    def questions(self, split: str, count: int, start: int = 0) -> list[QATask]:
        return [self.question(split, i) for i in range(start, start + count)]

    def _walk(self, split: str, hops: int, rng: random.Random
              ) -> list[tuple[Entity, Relation]] | None:
        """A chain of `hops` (entity, relation) pairs through distinct entities; None when it
        runs into entities it has visited."""
        # One hop must start where the asked relations are.
        kinds = [k for k in KINDS if hops > 1 or any(self._askable(r) for r in _BY_KIND[k])]
        kind = rng.choice(kinds)
        entity = self.entity(split, kind, rng.randrange(self.config.count(kind)))
        visited = {entity.id}
        chain = []
        for hop in range(hops):
            last = hop == hops - 1
            options = [r for r in _BY_KIND[entity.kind]
                       if (self._askable(r) if last else r.target is not None) and (
                           r.target is None or self.linked(entity, r).id not in visited)]
            if not options:
                return None
            relation = rng.choice(options)
            chain.append((entity, relation))
            if relation.target is not None and not last:
                entity = self.linked(entity, relation)
                visited.add(entity.id)
        return chain

    def _askable(self, relation: Relation) -> bool:
        """Whether the last hop may ask `relation`."""
        return not self.config.answer_relations or relation.name in self.config.answer_relations


def _syllables_needed(names: int) -> int:
    length = 1
    while len(_SYLLABLES) ** length < names:
        length += 1
    return length


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise invalid("World", "split", split, f"one of {SPLITS}")
