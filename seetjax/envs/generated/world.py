"""Random initial states (`initial_config` entries) of the BFCL API classes.

Each builder returns the scenario dict one class's `_load_scenario` reads, in the shape BFCL's own
entries use, plus `WorldFacts`: what the user knows but the state does not hold (ticket login
credentials). Entities come from `vocab` of the task's split; `size` scales how much state there
is (long_context tasks use a large one, beside BFCL's own `long_context=True` padding).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from seetjax.envs.generated.vocab import vocab

EXTENSIONS = (".txt", ".csv", ".md", ".log", ".json")


@dataclass
class WorldFacts:
    """What the simulated user knows beyond the initial state (credentials)."""

    credentials: dict[str, tuple[str, str]] = field(default_factory=dict)


def _sample(rng: random.Random, items: tuple[str, ...], low: int, high: int,
            size: int) -> list[str]:
    """Between low*size and high*size distinct items (fewer if the list is shorter)."""
    return rng.sample(items, min(rng.randint(low * size, high * size), len(items)))


def file_content(rng: random.Random, split: str) -> str:
    """1-4 distinct lines from the split's line vocabulary."""
    return "\n".join(rng.sample(vocab("line", split), rng.randint(1, 4)))


def file_system(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """A root folder named after a person with files and folders two levels deep."""

    def directory(depth: int) -> dict[str, Any]:
        contents: dict[str, Any] = {}
        stems = _sample(rng, vocab("stem", split), 1, 3, size)
        for stem in stems:
            contents[stem + rng.choice(EXTENSIONS)] = {"type": "file",
                                                       "content": file_content(rng, split)}
        if depth < 2:
            for folder in rng.sample(vocab("folder", split), rng.randint(depth == 0, 2)):
                contents[folder] = directory(depth + 1)
        return {"type": "directory", "contents": contents}

    root = rng.choice(vocab("person", split)).lower()
    return {"root": {root: directory(0)}}


def message_api(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """Workspace users USR001.. with a few sent messages; half the time someone is logged in."""
    people = _sample(rng, vocab("person", split), 3, 5, size)
    user_map = {name: f"USR{i + 1:03d}" for i, name in enumerate(people)}
    ids = list(user_map.values())
    inbox = [{rng.choice(ids): rng.choice(vocab("message", split))}
             for _ in range(rng.randint(size, 3 * size))]
    return {"user_count": len(people), "user_map": user_map, "inbox": inbox,
            "message_count": len(inbox), "current_user": rng.choice([None, rng.choice(ids)]),
            "random_seed": rng.randint(0, 10**6)}


def ticket_api(rng: random.Random, split: str, size: int, facts: WorldFacts) -> dict[str, Any]:
    """A ticket queue of the user and colleagues; half the time the user is logged in."""
    person, *others = rng.sample(vocab("person", split), 3)
    username = f"{person.lower()}_{rng.randint(10, 99)}"
    password = "".join(rng.choices(string.ascii_letters + string.digits, k=8))
    facts.credentials["TicketAPI"] = (username, password)
    queue = []
    for i, title in enumerate(_sample(rng, vocab("title", split), 1, 3, size)):
        owner = username if rng.random() < 0.7 else f"{rng.choice(others).lower()}_{i}"
        queue.append({"id": i + 1, "title": title,
                      "description": rng.choice(vocab("description", split)),
                      "status": rng.choice(["Open", "Open", "In Progress", "Closed"]),
                      "priority": rng.randint(1, 5), "created_by": owner})
    return {"ticket_queue": queue, "ticket_counter": len(queue) + 1,
            "current_user": rng.choice([None, username])}


# Stateless classes (MathAPI) have no entry: bfcl_eval does not load a scenario for them.
BUILDERS: dict[str, Callable[[random.Random, str, int, WorldFacts], dict[str, Any]]] = {
    "GorillaFileSystem": file_system,
    "MessageAPI": message_api,
    "TicketAPI": ticket_api,
}


def initial_config(classes: list[str], rng: random.Random, split: str,
                   size: int) -> tuple[dict[str, Any], WorldFacts]:
    """The initial_config of a task involving `classes`, and the facts that go with it."""
    facts = WorldFacts()
    config = {c: BUILDERS[c](rng, split, size, facts) for c in classes if c in BUILDERS}
    return config, facts
