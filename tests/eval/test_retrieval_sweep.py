"""The retrieval sweep's measures: ground-truth recall on a scripted toolset, prompt tokens."""

from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.eval import retrieval_sweep
from seetjax.tools import prompts

BASE0 = load_tasks("base")[0]  # ground truth per turn: {cd, mkdir, mv}, {cd, grep}, {sort}, {cd, mv, diff}


def test_recall_counts_turns_whose_every_ground_truth_function_is_offered(monkeypatch):
    script = {0: ["cd", "mkdir", "mv", "ls"], 1: ["grep", "tail"], 2: ["sort"], 3: ["cd", "mv"]}
    monkeypatch.setattr(retrieval_sweep, "offered_docs",
                        lambda task, turn, settings: tuple({"name": n} for n in script[turn]))
    config = BfclEnvConfig(tool_retrieval="bm25", tool_retrieval_k=5)
    # Turn 0 and 2 have all theirs; turn 1 lacks cd, turn 3 lacks diff.
    assert retrieval_sweep.recall_turns([BASE0], config) == (2, 4)


def test_recall_without_retrieval_misses_only_tools_held_out_at_the_time():
    off = BfclEnvConfig()
    assert retrieval_sweep.recall_turns([BASE0], off) == (4, 4)
    # miss_func_49's ground truth calls the held-out `tail` two turns before revealing it.
    hits, turns = retrieval_sweep.recall_turns([load_tasks("miss_func")[49]], off)
    assert hits == turns - 1


def test_prompt_tokens_shrink_with_few_retrieved_bfcl_docs(tokenizer):
    off = BfclEnvConfig(prompt_style="bfcl")
    top5 = BfclEnvConfig(prompt_style="bfcl", tool_retrieval="bm25", tool_retrieval_k=5)
    every = retrieval_sweep.prompt_tokens(BASE0, off, tokenizer)
    # The system prompt over every doc is in it, with the four user turns.
    assert every > len(tokenizer.encode(prompts.bfcl_system_prompt(BASE0.docs))) + sum(
        len(tokenizer.encode(m["content"])) for turn in BASE0.turns for m in turn)
    assert retrieval_sweep.prompt_tokens(BASE0, top5, tokenizer) < every / 2
