"""BFCL single-turn tasks through an OpenAI-compatible endpoint (our own server, over HTTP): the
same replies and verdicts as the in-process greedy evaluation; `launch/evaluate.py --endpoint`."""

import json
import subprocess
import sys
from pathlib import Path

import jax

from seetjax.envs.bfcl import single_turn as bfcl_single
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.eval import single_turn_eval
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.policy import SamplerPolicy
from seetjax.sampling import SamplingParams
from seetjax.serving.client import EndpointConfig, EndpointPolicy, single_turn_replies
from tests.serving.servinglib import MODEL_NAME

ROOT = Path(__file__).resolve().parents[2]
LIMITS = EpisodeLimits(max_reply_tokens=12, max_episode_tokens=2400)


def test_endpoint_replies_match_in_process_greedy(server, engine, tokenizer):
    config = BfclEnvConfig(prompt_style="compact")
    tasks = bfcl_single.load(["simple", "live_parallel", "irrelevance"], per_category=2)
    local = single_turn_eval.generate_replies(
        tasks, SamplerPolicy(engine.sampler, engine.params, SamplingParams(0.0),
                             tokenizer.stop_ids, jax.random.key(0)), tokenizer, config, LIMITS)
    policy = EndpointPolicy(EndpointConfig(url=server.url, model=MODEL_NAME, concurrency=2),
                            tokenizer)
    remote = single_turn_replies(policy, tasks, tokenizer, config, LIMITS)
    assert remote == local and all(r is not None for r in remote)
    assert policy.requests == len(tasks) and policy.failed_episodes == 0
    assert (single_turn_eval.check_replies(tasks, remote, config)
            == single_turn_eval.check_replies(tasks, local, config))


def test_launch_evaluate_endpoint_reports_single_turn(server, tmp_path):
    stem = tmp_path / "endpoint_eval"
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--endpoint={server.url}",
         f"--model={MODEL_NAME}", f"--out={stem}", "--categories=simple,live_relevance",
         "--per_category=1", "--max_reply_tokens=8", "--max_episode_tokens=2400",
         "--concurrency=2", "--max_retries=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not stem.with_suffix(".json").exists()  # no multi-turn category was asked for
    (row,) = json.loads((tmp_path / "endpoint_eval.single_turn.json").read_text())
    assert row["total"] == {"simple": 1, "live_relevance": 1}
    assert "| single-turn |" in stem.with_suffix(".md").read_text()
    assert f"2 requests to {server.url}" in out.stdout
