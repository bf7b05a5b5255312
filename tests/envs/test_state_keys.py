"""Exact state keys (`seetjax.envs.state_keys`): one state reached by different call orders has
one key, BFCL's and generated tasks' alike; another state, or another turn, another key."""

import random

import pytest

from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.envs.generated import generate_tasks
from seetjax.envs.state_keys import state_digest, state_key


def _key_after(task, *replies):
    env = BfclEnv(BfclEnvConfig(prompt_style="compact"))
    env.reset(task)
    for reply in replies:
        env.step(reply)
    return state_key(env)


def test_bfcl_one_state_by_two_call_orders_has_one_key():
    task = load_tasks("base")[0]  # GorillaFileSystem: the tree's dicts fill in call order
    a = _key_after(task, "[mkdir(dir_name='a'), mkdir(dir_name='b')]")
    assert a == _key_after(task, "[mkdir(dir_name='b')]", "[mkdir(dir_name='a')]")
    assert a != _key_after(task, "[mkdir(dir_name='b')]")  # another state
    assert a != _key_after(task, "[mkdir(dir_name='a'), mkdir(dir_name='c')]")
    start = _key_after(task)
    assert start == _key_after(task) and start != a
    # turn 1 from the untouched state: the same API state, another user message pending
    assert _key_after(task, "Done.") != start
    # the current directory is state too, though the tree is the same
    assert _key_after(task, "[cd(folder='document')]") != start


def test_generated_one_state_by_two_call_orders_has_one_key():
    task = generate_tasks(3, seed=0)[2]  # TravelAPI, whose random generator is state too
    assert task.involved_classes == ("TravelAPI",)
    both = _key_after(task, "[get_all_credit_cards(), list_all_airports()]")
    assert both == _key_after(task, "[list_all_airports()]", "[get_all_credit_cards()]")
    assert both != _key_after(task, "[list_all_airports()]")  # an output fewer


def test_a_restored_snapshot_has_the_key_it_was_taken_at():
    env = BfclEnv(BfclEnvConfig(prompt_style="compact"))
    env.reset(load_tasks("base")[0])
    env.step("[cd(folder='document')]")
    before, snapshot = state_key(env), env.snapshot()
    env.step("[mkdir(dir_name='x')]")
    assert state_key(env) != before
    env.restore(snapshot)
    assert state_key(env) == before


class Node:
    def __init__(self, name, parent=None):
        self.name, self.parent, self.children = name, parent, {}
        self._last_modified = random.random()  # the wall clock's stand-in: not state


def _tree(order):
    root = Node("/")
    for name in order:
        root.children[name] = Node(name, root)
    return {"root": root, "cwd": root.children["b"]}


def test_canonical_form_is_order_free_cycle_safe_and_alias_aware():
    assert state_digest(_tree("ab")) == state_digest(_tree("ba"))  # parent links: cycles
    moved = _tree("ab")
    moved["cwd"] = moved["root"].children["a"]
    assert state_digest(moved) != state_digest(_tree("ab"))  # which node is aliased counts
    copy = _tree("ab")
    copy["cwd"] = Node("b", copy["root"])  # equal values, but not the tree's node
    assert state_digest(copy) != state_digest(_tree("ab"))
    assert state_digest({1, 2, 3}) == state_digest({3, 2, 1}) != state_digest([1, 2, 3])
    assert state_digest([1]) != state_digest([True]) != state_digest(["1"])
    assert state_digest((1, [2])) != state_digest((1, (2,)))
    assert state_digest(random.Random(1)) != state_digest(random.Random(2))
    deep = node = Node("0")
    for i in range(5000):  # deeper than Python's recursion limit
        node.children["d"] = node = Node(str(i), node)
    assert len(state_digest(deep)) == 64
    with pytest.raises(TypeError, match="cannot key a memoryview"):
        state_digest({"x": memoryview(b"")})
    assert state_key(object()) is None  # an environment that does not say its state
