"""Generated BFCL-format multi-turn tasks (see `generator`): `generate_tasks(n, seed=...)`."""

from seetjax.envs.generated.generator import Difficulty, generate_task, generate_tasks, task_entry
from seetjax.envs.generated.plans import CLASSES

__all__ = ["CLASSES", "Difficulty", "generate_task", "generate_tasks", "task_entry"]
