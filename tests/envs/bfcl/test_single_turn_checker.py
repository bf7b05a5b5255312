"""The single-turn checker against bfcl_eval's own `ast_checker` and relevance rules, on every
entry, and its semantics case by case."""

import collections
import dataclasses
import random

from seetjax.envs.bfcl import single_turn as bfcl_single
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.single_turn import ExpectedCall, parse_reply
from seetjax.envs.bfcl.single_turn_checker import DECODER_FAILED, IRRELEVANCE_ERROR, check
from seetjax.tools.calls import ParseError, ToolCall
from tests.envs.bfcl.bfcl_ast_reference import bfcl_relevance_verdict, bfcl_verdict
from tests.envs.bfcl.single_turn_perturb import PERTURBATIONS, ground_truth, perturb

AST = [t for c in bfcl_single.NON_LIVE_AST + bfcl_single.LIVE_AST
       for t in bfcl_single.load_tasks(c)]
NO_ANSWER = [t for c in bfcl_single.IRRELEVANCE + bfcl_single.RELEVANCE
             for t in bfcl_single.load_tasks(c)]


def _agree(task, calls, underscore_to_dot=False, own_answers=False):
    """Both verdicts on `calls`, asserted equal; `own_answers`: a task made here, whose possible
    answers bfcl_eval gets from the task rather than from its files."""
    answer = [{a.name: {p: list(v) for p, v in a.choices.items()}} for a in task.answers]
    ours = check(task, calls, underscore_to_dot)
    theirs = bfcl_verdict(task, calls, underscore_to_dot, answer if own_answers else None)
    assert ours.valid == theirs["valid"], (task.id, calls, ours, theirs)
    assert ours.valid or ours.error_type == theirs["error_type"], (task.id, calls, ours, theirs)
    return ours.valid


def test_ground_truths_and_perturbations_get_bfcl_evals_verdicts():
    """Every AST entry's ground truth (first and last accepted values; dotted names also under
    the underscore rule of function-calling models), then every perturbation kind on a ground
    truth of randomly picked accepted values: same verdict and error type as bfcl_eval."""
    assert len(AST) == 2351
    rng = random.Random(0)
    outcomes = collections.Counter()
    for task in AST:
        for pick in ("first", "last"):
            outcomes["ground truth", _agree(task, ground_truth(task, pick))] += 1
        if any("." in a.name for a in task.answers):
            outcomes["underscored", _agree(task, ground_truth(task, underscore_to_dot=True),
                                           True)] += 1
            outcomes["dotted, fc", _agree(task, ground_truth(task), True)] += 1
        for kind in PERTURBATIONS:
            outcomes[kind, _agree(task, perturb(task, kind, rng))] += 1
    assert sum(outcomes.values()) >= 27_000
    # BFCL's own answers pass, bar a few of its data's quirks (a required parameter whose
    # first accepted value is "", an answer naming a parameter its doc lacks).
    assert outcomes["ground truth", True] >= 4_650 and outcomes["ground truth", False] <= 30
    assert outcomes["underscored", True] >= 730 and outcomes["dotted, fc", False] >= 730
    for kind in ("value", "type", "missing_required", "extra", "name", "count"):
        assert outcomes[kind, False] >= 2_000, kind  # mistakes fail...
    for kind in ("order", "string_form", "drop_optional"):
        assert outcomes[kind, True] >= 1_000, kind  # ...and harmless variations pass


def test_irrelevance_and_relevance_get_bfcl_evals_verdicts():
    rng = random.Random(1)
    checked = 0
    for task in NO_ANSWER:
        other = rng.choice(AST)
        made = [ToolCall(d["name"], {}) for d in task.docs[:rng.randint(1, 2)]]
        for calls in ([], ground_truth(other), made):
            _agree(task, calls)
            checked += 1
    assert checked >= 3_400
    error = ParseError("invalid syntax", "python")  # bfcl_eval's decoder fails: no call made
    irrelevance, relevance = (bfcl_single.load_tasks(c)[0] for c in ("irrelevance", "live_relevance"))
    assert check(irrelevance, error).valid and not check(relevance, error).valid
    assert check(irrelevance, [ToolCall("f")]).error_type == IRRELEVANCE_ERROR


def _refused_values(name: str, param: str) -> list[str]:
    """Replies calling `name` with values we refuse and bfcl_eval reads or fails on: arithmetic
    (which it computes; with a name in it, its `eval` fails), values past our bounds or without
    a JSON form, and a refusal followed by a part its decoder cannot read."""
    values = ["2 + 3", "'a' + 'b'", "10 * 4.5 - 1", "(1, 2) + (3,)", "-2 ** 2", "[1] * 3",
              "1e999", "9" * 70, "'" + "x" * 20_000 + "'", "[" * 20 + "]" * 20,
              "[" + "0, " * 1100 + "]", "1j", "b'x'", "{'k': 2 * 3}", "y + 1", "(y + 1) * 2"]
    calls = [f"{name}({param}={v})" for v in values]
    return [f"[{c}]" for c in calls] + [
        f"```\n{calls[0]}\n```", f"{calls[6]}, {name}()", f"[{calls[0]}, 5]",
        f"[{name}({param}=1e999, other=lambda: 1)]", f"[{name}({param}=2 + 3, other=-y)]",
        f"[{name}({param}=2 + 3, other={{[1]: 2}})]", f"[{name}({param}=2 +)]"]


def test_refused_values_get_bfcl_evals_relevance_verdicts():
    """A call bfcl_eval's decoder reads is a call made, whatever value of it we refuse to read:
    an irrelevance entry fails on it and a relevance entry passes, under both decodings."""
    rng = random.Random(2)
    tasks = [t for c in bfcl_single.IRRELEVANCE for t in rng.sample(bfcl_single.load_tasks(c), 25)]
    tasks += list(bfcl_single.load_tasks("live_relevance"))
    outcomes = collections.Counter()
    for task in tasks:
        doc = rng.choice(task.docs)
        param = next(iter(doc["parameters"]["properties"]), "x")
        for text in _refused_values(doc["name"], param):
            theirs = bfcl_relevance_verdict(task, text)
            for decoding in ("lenient", "official"):
                config = BfclEnvConfig(prompt_style="bfcl", decoding=decoding)
                ours = check(task, parse_reply(task, text, config))
                assert (ours.valid, ours.error_type) == (theirs["valid"], theirs["error_type"]), (
                    task.id, decoding, text[:100], ours, theirs)
                outcomes[task.category in bfcl_single.RELEVANCE, ours.valid] += 1
    assert min(outcomes.values()) >= 100, outcomes  # calls made and not, on both kinds


def _task(category, docs, answers):
    return bfcl_single.SingleTurnTask("t_0", category, ({"role": "user", "content": "?"},),
                                      tuple(docs), tuple(answers))


def _doc(name, required, **types):
    properties = {p: ({"type": t, "items": {"type": "integer"}} if t == "array" else {"type": t})
                  for p, t in types.items()}
    return {"name": name, "parameters": {"type": "dict", "properties": properties,
                                         "required": list(required)}}


def test_value_rules():
    doc = _doc("f", ["x"], x="float", s="string", xs="array", b="boolean")
    task = _task("simple", [doc], [ExpectedCall("f", {"x": (2.0,), "s": ("New York, NY", ""),
                                                      "xs": ([1, 2], ""), "b": (False, "")})])
    # bfcl_eval's quirk kept: the optional marker "" among the accepted lists lets items of any
    # type through the type check, and [1.0, 2.0] == [1, 2] in Python.
    passes = [{"x": 2}, {"x": 2.0, "s": "new york ny"}, {"x": 2.0, "s": "NEW-YORK,NY"},
              {"x": 2.0, "xs": [1, 2]}, {"x": 2.0, "b": False}, {"x": 2.0, "xs": [1.0, 2.0]}]
    fails = [{"x": "2.0"}, {"s": "New York, NY"}, {"x": 2.0, "s": "Boston"},
             {"x": 2.0, "xs": [2, 1]}, {"x": 2.0, "xs": (1, 2)}, {"x": 2.0, "b": 0},
             {"x": 2.0, "y": 1}, {"x": 2.0, "xs": ["1", "2"]}]
    for args, expected in [(a, True) for a in passes] + [(a, False) for a in fails]:
        ours = check(task, [ToolCall("f", args)])
        assert ours.valid == expected, (args, ours)
        assert _agree(task, [ToolCall("f", args)], own_answers=True) == ours.valid
    assert not check(task, [ToolCall("g", {"x": 2.0})]).valid
    assert check(task, ParseError("bad", "python")).error_type == DECODER_FAILED


def test_parallel_matching_is_order_free_but_greedy_as_bfcl_evals():
    doc = _doc("f", ["x"], x="integer")
    answers = [ExpectedCall("f", {"x": (1, 2)}), ExpectedCall("f", {"x": (1,)})]
    task = _task("parallel", [doc], answers)
    assert check(task, [ToolCall("f", {"x": 2}), ToolCall("f", {"x": 1})]).valid
    # A maximum matching would pair x=2 with the first answer; bfcl_eval's first answer takes
    # the first call that fits it (x=1), leaving x=2 for the second answer, which refuses it.
    greedy = [ToolCall("f", {"x": 1}), ToolCall("f", {"x": 2})]
    assert not check(task, greedy).valid and not _agree(task, greedy, own_answers=True)
    swapped = dataclasses.replace(task, answers=tuple(reversed(answers)))
    assert check(swapped, greedy).valid
