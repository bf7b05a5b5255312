"""A training run's checkpoints (`seetjax.rl.trainer`): its parameter sets
(`PolicyStates.checkpointed`), the caller state beside them (the step, the curriculum, the policy
tokens sampled so far) and each process's anchor pool, written first so that a committed
checkpoint always has its pool. Resuming takes the latest intact one: a damaged checkpoint (a
checksum that differs, its caller state or anchor pool missing) is set aside and the one before
it taken; with none left the run refuses unless told to `start_over`."""

from __future__ import annotations

import json
from pathlib import Path

import jax

from seetjax.learner.checkpoint import Checkpointer, DamagedCheckpoints
from seetjax.report.console import say
from seetjax.report.metrics import rewind_metrics
from seetjax.rl.config import Plan
from seetjax.rl.evals import RunEvaluations
from seetjax.rl.policy_states import PolicyStates
from seetjax.seet.anchors import AnchorPool
from seetjax.seet.curriculum import Curriculum


class RunCheckpoints:
    """The checkpoints of the run in `workdir` (the last `keep_last` kept), of run `plan`."""

    def __init__(self, workdir: Path, plan: Plan, keep_last: int, start_over: bool = False):
        self.workdir, self.plan = workdir, plan
        self.start_over = start_over  # with every checkpoint damaged: train from step 0
        self.checkpointer = Checkpointer(workdir / "checkpoints", keep_last=keep_last)

    def save(self, step: int, policies: PolicyStates, curriculum: Curriculum, pool: AnchorPool,
             policy_tokens: int) -> None:
        """Checkpoint `step`, this process's anchor pool written first beside it."""
        path = self._pool_file(step)
        path.parent.mkdir(exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(pool.state_dict()))
        path.with_suffix(".tmp").replace(path)
        caller = {"step": step, "curriculum": curriculum.state_dict(),
                  "policy_tokens": policy_tokens}
        self.checkpointer.save(step, policies.checkpointed, caller_state=caller)

    def resume(self, policies: PolicyStates, curriculum: Curriculum, pool: AnchorPool,
               evals: RunEvaluations) -> tuple[int, int]:
        """Restores the latest intact checkpoint into `policies`, `curriculum` and `pool`, and
        rewinds metrics.jsonl and `evals` to it; returns (its step, its policy tokens), (0, 0)
        without one. With checkpoints but none intact it refuses (nothing changed) unless
        `start_over`."""
        try:
            restored = self.checkpointer.restore_intact(policies.checkpointed,
                                                        check=self._check_caller)
        except DamagedCheckpoints as e:
            if not self.start_over:
                raise DamagedCheckpoints(
                    f"{e}. Nothing was changed: inspect them, or run again with --start_over "
                    "to train from step 0, discarding the run's metrics") from None
            say(f"starting over from step 0: {e}")
            restored = None
        if restored is None:
            if jax.process_index() == 0:  # a run that never checkpointed starts over
                (self.workdir / "metrics.jsonl").unlink(missing_ok=True)
            evals.drop_after(0)
            return 0, 0
        states, caller, step = restored
        policies.restore(states)
        curriculum.load_state_dict(caller["curriculum"])
        pool.load_state_dict(json.loads(self._pool_file(step).read_text()))
        rewind_metrics(self.workdir, step)  # steps after the checkpoint are run again
        evals.drop_after(step)
        say(f"resumed at step {step} (stage {curriculum.stage.stage})")
        # checkpoints written before the counter existed restart it at 0
        return step, int(caller.get("policy_tokens", 0))

    def wait(self) -> None:
        """Blocks until every started save is on disk (`Checkpointer.wait`)."""
        self.checkpointer.wait()

    def close(self) -> None:
        """Waits for the saves under way and stops the background writer."""
        self.checkpointer.close()

    def _pool_file(self, step: int) -> Path:
        return self.workdir / "anchors" / f"{step}.p{jax.process_index()}.json"

    def _check_caller(self, step: int, caller: dict) -> None:
        """Raises when what checkpoint `step` needs besides its arrays does not load: the step
        its caller state records, its curriculum, the anchor pool file beside it
        (`Checkpointer.restore_intact` then sets it aside)."""
        if caller.get("step") != step:
            raise ValueError(f"its caller state records step {caller.get('step')!r}")
        Curriculum(self.plan.stages, self.plan.transitions).load_state_dict(caller["curriculum"])
        int(caller.get("policy_tokens", 0))
        AnchorPool().load_state_dict(json.loads(self._pool_file(step).read_text()))
