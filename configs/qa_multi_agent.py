"""Multi-agent rollouts on the QA search environment: a coordinator delegates each hop of a
question to a worker search agent and composes the answer (`seetjax.rollout.multi_agent`); one
shared policy plays both roles, each reply trained in its agent's own row under its role's credit
(the team's QA reward, plus a worker's sub-answer bonus). The SFT warm-up is the oracle team's
dialogs (`data.source="qa_team"`: the coordinator's delegations and answer, each worker's search
and answer, rendered as the team rollout renders them), in the run's env and multi_agent
sections. configs/qa_search.py otherwise: the same held-out evaluation (single-agent episodes).
--config.multi_agent.separate_params=True gives each role a parameter set of its own
(seetjax.rl.policy_states).

    python launch/train.py --config=configs/qa_multi_agent.py --workdir=runs/qa_team
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("qa_search.py"))
    config.env.max_hops = 2  # questions worth splitting
    config.multi_agent.enabled = True
    config.multi_agent.max_rounds = 3  # up to two delegations, then the answer
    config.multi_agent.sub_answer_weight = 0.5
    sft = config.sft.run.data
    sft.source = "qa_team"
    sft.multi_agent = config.multi_agent  # the same section: the same round cap and prompt
    return config
