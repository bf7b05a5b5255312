"""Stage-2 interception is prefix-aware: a correct prefix is never blocked."""

from seetjax.seet.interception import intercept
from seetjax.tools.calls import ToolCall

GT = [ToolCall("cd", {"folder": "a"}), ToolCall("mkdir", {"dir_name": "b"}),
      ToolCall("mv", {"source": "x", "destination": "b"})]


def test_every_correct_prefix_passes():
    for done in range(len(GT) + 1):
        for n in range(1, len(GT) - done + 1):
            assert intercept(GT[:done], GT[done:done + n], GT) is None
    assert intercept(GT, [], GT) is None  # ending a complete turn


def test_wrong_calls_are_blocked_with_the_divergence_named():
    blocked = intercept(GT[:1], [ToolCall("mkdir", {"dir_name": "c"})], GT)
    assert (blocked.divergence.kind, blocked.divergence.index) == ("argument", 1)
    assert "`mkdir`" in blocked.hint and "dir_name='b'" not in blocked.hint
    revealed = intercept(GT[:1], [ToolCall("mkdir", {"dir_name": "c"})], GT,
                         reveal_arguments=True)
    assert "mkdir(dir_name='b')" in revealed.hint
    assert intercept([], [ToolCall("ls", {})], GT).divergence.kind == "tool_name"
    assert intercept(GT[:2], [], GT).divergence.kind == "missing_call"
    extra = intercept(GT, [ToolCall("ls", {})], GT)
    assert (extra.divergence.kind, extra.divergence.index) == ("extra_call", 3)
    assert "needs no further calls" in extra.hint


def test_order_free_accepts_any_remaining_call():
    swapped = [GT[1], GT[0]]
    assert intercept([], swapped, GT, order_free=False) is not None
    assert intercept([], swapped, GT) is None  # the default: BFCL's order semantics
    assert intercept(swapped, [GT[2]], GT) is None
    d = intercept([GT[1]], [ToolCall("mkdir", {"dir_name": "z"})], GT)
    assert d.divergence.kind == "tool_name"  # the remaining calls are cd and mv
    d = intercept([], [ToolCall("mv", {"source": "y", "destination": "b"})], GT)
    assert (d.divergence.kind, d.divergence.changed_keys) == ("argument", ("source",))
    assert intercept([], [ToolCall("cd", {"folder": "a"}, ())], GT) is None  # canonical match


def test_a_reordering_that_changes_the_outcome_is_blocked():
    seen = []

    def same_outcome(a, b):
        seen.append((list(a), list(b)))
        return False

    d = intercept([], [GT[1]], GT, same_outcome=same_outcome)
    assert (d.divergence.kind, d.divergence.index) == ("tool_name", 0)
    assert "`cd`" in d.hint
    # the ground truth's order from here against the proposal followed by the rest in order
    assert seen == [(GT, [GT[1], GT[0], GT[2]])]
    assert intercept(GT[:1], GT[1:2], GT, same_outcome=same_outcome) is None  # in order: no run
    assert len(seen) == 1
    assert intercept([], [GT[1]], GT, same_outcome=lambda a, b: True) is None
