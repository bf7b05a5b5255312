"""When a run's rollouts play relative to its updates (`config.rollout.schedule`): in turn
("sync"), or ahead of them within a staleness bound ("async": `seetjax.rl.async_rollouts`)."""

from __future__ import annotations

import dataclasses

import ml_collections

from seetjax.config.fields import as_dataclass
from seetjax.errors import invalid, require, require_int

SCHEDULES = ("sync", "async")
FIELDS = ("schedule", "max_staleness", "sampler_devices")  # of a run config's rollout section


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """schedule: "sync" (each step's rollouts with the learner's current weights, then its
    update) or "async" (`seetjax.rl.async_rollouts`: the next steps' rollouts play during the
    update); max_staleness: k, the most weight versions (optimizer updates) a trained token may
    be behind the learner; sampler_devices: the first N devices sample and the rest learn (0:
    all devices shared, which "async" allows on one device only)."""

    schedule: str = "sync"
    max_staleness: int = 1
    sampler_devices: int = 0

    def __post_init__(self):
        require(self.schedule in SCHEDULES, self, "schedule", self.schedule,
                f"must be one of {SCHEDULES}")
        for name in ("max_staleness", "sampler_devices"):
            require_int(self, name, getattr(self, name), 0)

    def lag(self, mini_batches: int) -> int:
        """Steps a rollout may run ahead of the learner: k // mini_batches (0 with "sync")."""
        return self.max_staleness // mini_batches if self.schedule == "async" else 0

    def check(self, mini_batches: int) -> None:
        """Refuses an asynchronous schedule whose bound lets nothing overlap."""
        if self.schedule == "async" and not self.lag(mini_batches):
            raise invalid("config.rollout", "max_staleness", self.max_staleness,
                          f"each step's update is learner.mini_batches={mini_batches} versions: "
                          f"with schedule='async' it must be at least {mini_batches}, or no "
                          "rollout could start before the update it would overlap")


def schedule_of(rollout: ml_collections.ConfigDict) -> ScheduleConfig:
    """The schedule fields of a run config's `rollout` section (absent in configs saved before
    them: "sync")."""
    fields = {k: rollout[k] for k in FIELDS if k in rollout}
    return as_dataclass(ScheduleConfig, fields, "rollout")
