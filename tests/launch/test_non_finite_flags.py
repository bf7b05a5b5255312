"""Number flags of the launchers: NaN and infinities refused, each flag named, before anything
loads (launch/evaluate.py's are in test_evaluate_cli.py, train.py's config in test_train_cli.py)."""

from tests.launch.flagcheck import assert_flag_errors


def test_sample_refuses_non_finite_sampling_values():
    assert_flag_errors("launch/sample.py", [
        (["--temperature=inf"], "--temperature must be a finite number"),
        (["--temperature=nan"], "--temperature must be a finite number"),
        (["--top_p=nan"], "--top_p must be a finite number in (0, 1]"),
        (["--top_p=1.5"], "--top_p must be a finite number in (0, 1]"),
        (["--temperature=0.7", "--top_p=0.9"], "")])


def test_retrieval_refuses_non_finite_numbers_and_an_empty_workdir():
    assert_flag_errors("launch/retrieval.py", [
        (["--learning_rate=nan"], "--learning_rate must be a finite number"),
        (["--test_fraction=inf"], "--test_fraction must be a finite number"),
        (["--workdir="], "--workdir names no directory"),
        (["--learning_rate=0.0001"], "")])
