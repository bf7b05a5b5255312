"""configs/qa_search.py from a warm-up that over-searches: 60% of the oracle's demonstrations run
the question's search a second time before answering (`env.oracle_recheck`). That search returns
what the first did, so it is worth nothing, and a search cost should teach RL to drop it: the
setting of the search-cost sweep, where in configs/qa_search.py one search is both needed and
enough at every lambda the sweep tries (experiments/qa_algorithms/README.md).

    python experiments/qa_algorithms/ablate_qa.py --config=configs/qa_search_recheck.py \
        --algorithms=rloo --out=experiments/qa_algorithms/results/ablate_qa_recheck
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("qa_search.py"))
    # Above a half, so the greedy warm-up rechecks; sampled at temperature 0.5 about 70% of
    # replies do, leaving RL both kinds of episode to compare.
    config.env.oracle_recheck = 0.6
    return config
