"""Supervised fine-tuning: every field of an SFT run and its validation (`config`, a declaration
that never imports the run), and the run itself (`run`: `SFTRun`, given a resolved model
directory).

Imports `data`, `envs`, `learner`, `models`, `rollout` (the team config of QA dialogs),
`config`, `report` and `batch`; never `defaults` or `rl`, which call it.
"""
