"""Generated BFCL-format multi-turn tasks: a seeded, unlimited supply beside BFCL's 800.

A task is built the way a BFCL entry is shaped, so `BfclEnv`, the checker and SEET apply
unchanged: a random initial state per involved class (`world`), a plan of 1-4 user turns whose
actions are proposed from the live state and EXECUTED on fresh instances (`plans`; an action with a
failing call is discarded and another drawn, so the ground truth is correct by construction), and
user turns rendered from split-specific paraphrases (`templates`). Variants follow BFCL's data:

- `miss_param`: one turn omits an argument; its ground truth is empty (the model must ask) and an
  inserted next turn supplies the value, with the turn's calls as its ground truth;
- `miss_func`: a tool of one turn is held out; that turn's ground truth is empty and an inserted
  turn with no user message reveals the tool (`missed_function`), with the calls;
- `long_context`: a larger state, loaded with `long_context=True` (BFCL's padding), which the
  checkers infer from "long_context" in the id.

Everything is a function of (seed, split, category, index, difficulty, classes): each task draws
from its own `random.Random`, never from global state. The `test` split uses disjoint entities
(`vocab`) and disjoint paraphrases.
"""

from __future__ import annotations

import copy
import functools
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bfcl_eval.utils import (
    add_language_specific_hint_to_function_doc,
    populate_test_cases_with_predefined_functions,
)

from seetjax.envs.bfcl.data import (
    CATEGORIES,
    BfclTask,
    class_schemas,
    new_instances,
    task_from_entry,
)
from seetjax.envs.generated import templates
from seetjax.envs.generated.plans import CLASSES, Action, PlanContext, plausible, propose
from seetjax.envs.generated.vocab import SPLITS
from seetjax.envs.generated.world import initial_config
from seetjax.errors import invalid
from seetjax.tools.executor import ToolExecutor

_ATTEMPTS_PER_TURN = 40
_ATTEMPTS_PER_TASK = 20


@dataclass(frozen=True)
class Difficulty:
    """Knobs of a generated task.

    turns: (min, max) planned user turns (miss_param and miss_func add one more);
    actions_per_turn: at most this many requests in one user turn;
    calls_per_turn: at most this many ground-truth calls in one turn;
    classes: at most this many API classes the plan uses (at most one domain class: `plans`);
    distractor_classes: extra involved classes whose tools are listed but never needed;
    state_size: scale of the initial state (long_context tasks triple it);
    named_values: whether requests may name values the calls must copy (names, numbers, text).
        False keeps only requests whose calls follow from the intent alone (which tool, fixed
        options: "turn the headlights off", "list the airports"), a tier for models that cannot
        yet copy a string they never saw; miss_param tasks need a named value, so it excludes
        them.
    """

    turns: tuple[int, int] = (1, 4)
    actions_per_turn: int = 2
    calls_per_turn: int = 3
    classes: int = 2
    distractor_classes: int = 0
    state_size: int = 1
    named_values: bool = True

    def __post_init__(self):
        low, high = self.turns
        if not 1 <= low <= high:
            raise invalid(self, "turns", self.turns, "must be (min_turns, max_turns) with"
                          " 1 <= min_turns <= max_turns")
        for name in ("actions_per_turn", "calls_per_turn", "classes", "state_size"):
            if getattr(self, name) < 1:
                raise invalid(self, name, getattr(self, name), "must be >= 1")


class _PlanFailed(Exception):
    """No valid action could be found for a turn; the task is drawn again."""


def generate_tasks(n: int, *, seed: int, split: str = "train", category: str = "base",
                   difficulty: Difficulty = Difficulty(), classes: Sequence[str] = CLASSES,
                   start: int = 0) -> list[BfclTask]:
    """Tasks `start .. start + n - 1` of the stream fixed by (seed, split, category, difficulty,
    classes); ids `gen_<split>_<category>_<seed>_<i>`."""
    return [generate_task(i, seed=seed, split=split, category=category, difficulty=difficulty,
                          classes=classes) for i in range(start, start + n)]


def generate_task(index: int, *, seed: int, split: str = "train", category: str = "base",
                  difficulty: Difficulty = Difficulty(), classes: Sequence[str] = CLASSES
                  ) -> BfclTask:
    """Task `index` of the stream (see `generate_tasks`)."""
    if split not in SPLITS:
        raise invalid("generate_task", "split", split, f"one of {SPLITS}")
    if category not in CATEGORIES:
        raise invalid("generate_task", "category", category, f"one of {CATEGORIES}")
    if category == "miss_param" and not difficulty.named_values:
        raise invalid("generate_task", "category", category, "miss_param tasks leave a named "
                      "value out of a request, so they need Difficulty(named_values=True)")
    unknown = set(classes) - set(CLASSES)
    if not classes or unknown:
        raise invalid("generate_task", "classes", classes, f"a non-empty subset of {CLASSES}")
    rng = random.Random(f"seetjax-generated:{seed}:{split}:{category}:{index}")
    for _ in range(_ATTEMPTS_PER_TASK):
        try:
            return _build(rng, f"gen_{split}_{category}_{seed}_{index}", split, category,
                          difficulty, tuple(classes))
        except _PlanFailed:
            continue
    hint = "" if difficulty.named_values else (
        f"; with named_values=False, {tuple(classes)} may have too few distinct requests that "
        "name no value for this many turns")
    raise RuntimeError(f"no valid plan for task {index} after {_ATTEMPTS_PER_TASK} attempts"
                       + hint)


def task_entry(task: BfclTask) -> dict[str, Any]:
    """The task as a raw BFCL entry (as in `bfcl_eval/data` with its `possible_answer`), for
    bfcl_eval's own tools such as `multi_turn_checker`."""
    entry = {"id": task.id, "question": [list(turn) for turn in task.turns],
             "initial_config": copy.deepcopy(dict(task.initial_config)),
             "involved_classes": list(task.involved_classes),
             "ground_truth": [list(turn) for turn in task.ground_truth_text]}
    if task.held_out:
        entry["missed_function"] = {str(t): [d["name"] for d in docs]
                                    for t, docs in task.held_out.items()}
    return entry


def _build(rng: random.Random, task_id: str, split: str, category: str, difficulty: Difficulty,
           classes: tuple[str, ...]) -> BfclTask:
    long_context = category == "long_context"
    used = _draw_classes(rng, classes, difficulty.classes)
    spare = [c for c in classes if c not in used]
    involved = used + rng.sample(spare, min(difficulty.distractor_classes, len(spare)))
    rng.shuffle(involved)
    size = difficulty.state_size * (3 if long_context else 1)
    config, facts = initial_config(involved, rng, split, size)
    executor = ToolExecutor(new_instances(involved, config, long_context),
                            {c: class_schemas(c) for c in involved})
    ctx = PlanContext(rng, split, facts, executor, config)

    num_turns = rng.randint(*difficulty.turns)
    vague_turn = rng.randrange(num_turns) if category == "miss_param" else None
    plan = [_plan_turn(ctx, used, difficulty, vague=t == vague_turn) for t in range(num_turns)]

    questions = [_render(rng, split, actions, vague=t == vague_turn) for t, actions in enumerate(plan)]
    truth = [[c.to_python() for a in actions for c in a.calls] for actions in plan]
    missed: dict[str, list[str]] = {}
    if vague_turn is not None:
        action = plan[vague_turn][0]
        label = templates.VAGUE[action.intent][0]
        supply = rng.choice(templates.for_split(templates.SUPPLY, split))
        questions.insert(vague_turn + 1, templates.sentence(supply.format(
            label=label, value=action.slots[action.missing])))
        truth.insert(vague_turn + 1, truth[vague_turn])
        truth[vague_turn] = []
    elif category == "miss_func":
        turn, tool = _held_out_tool(rng, plan)
        questions.insert(turn + 1, None)
        truth.insert(turn + 1, truth[turn])
        truth[turn] = []
        missed = {str(turn + 1): [tool]}

    entry: dict[str, Any] = {
        # bfcl_eval prepares docs only for ids it recognises as multi-turn: a stand-in id.
        "id": f"multi_turn_{category}_0", "involved_classes": involved,
        "question": [[{"role": "user", "content": q}] if q is not None else [] for q in questions],
        "initial_config": config, "ground_truth": truth,
    }
    if missed:
        entry["missed_function"] = missed
    entry = add_language_specific_hint_to_function_doc(
        populate_test_cases_with_predefined_functions([entry]))[0]
    entry["id"] = task_id
    return task_from_entry(category, entry)


def _draw_classes(rng: random.Random, classes: tuple[str, ...], most: int) -> list[str]:
    """1..`most` of `classes` for the plan, redrawn until `plausible` (as BFCL combines them)
    when `classes` has a plausible set of that size at all."""
    used = rng.sample(classes, rng.randint(1, min(most, len(classes))))
    if _has_plausible(classes, len(used)):
        while not plausible(used):
            used = rng.sample(classes, len(used))
    return used


@functools.cache
def _has_plausible(classes: tuple[str, ...], size: int) -> bool:
    return any(plausible(c) for c in itertools.combinations(classes, size))


def _plan_turn(ctx: PlanContext, used: list[str], difficulty: Difficulty,
               vague: bool) -> list[Action]:
    """The actions of one turn, each executed on the live instances before it is kept. A vague
    (miss_param) turn is one action with a slot its paraphrases can leave out."""
    wanted = 1 if vague else ctx.rng.randint(1, difficulty.actions_per_turn)
    actions: list[Action] = []
    calls = 0
    for _ in range(_ATTEMPTS_PER_TURN):
        if len(actions) == wanted:
            break
        class_name = ctx.rng.choice(used)
        action = propose(class_name, ctx)
        if action is None or calls + len(action.calls) > difficulty.calls_per_turn:
            continue
        # Without named values a repeated intent would be the same request word for word.
        if not difficulty.named_values and (action.slots or action.intent in ctx.intents):
            continue
        if vague and (action.missing is None or action.intent not in templates.VAGUE):
            continue
        # Shared immutable parts (schemas) are not copied; the instances and bound methods are.
        memo = {id(s): s for s in ctx.executor.schemas.values()}
        trial = copy.deepcopy(ctx.executor, memo)
        results = trial.execute_all(action.calls)
        if not all(r.ok for r in results):
            continue
        ctx.executor = trial
        ctx.last_output[class_name] = results[-1].output
        ctx.known.update(action.teaches)
        ctx.intents.add(action.intent)
        actions.append(action)
        calls += len(action.calls)
    if not actions:
        raise _PlanFailed
    return actions


def _render(rng: random.Random, split: str, actions: list[Action], vague: bool) -> str:
    parts = []
    for action in actions:
        if vague:
            paraphrases = templates.VAGUE[action.intent][1]
        else:
            paraphrases = templates.TEMPLATES[action.intent]
        parts.append((rng.choice(templates.for_split(paraphrases, split)), action.slots))
    return templates.render_turn(parts, templates.for_split(templates.CONNECTORS, split),
                                 rng.choice)


def _held_out_tool(rng: random.Random, plan: list[list[Action]]) -> tuple[int, str]:
    """A (turn, tool) for miss_func: a tool the turn calls that no earlier turn calls."""
    seen: set[str] = set()
    candidates = []
    for turn, actions in enumerate(plan):
        names = [c.name for a in actions for c in a.calls]
        candidates += [(turn, name) for name in dict.fromkeys(names) if name not in seen]
        seen.update(names)
    return rng.choice(candidates)
