"""Config helpers every config shares: errors that name their field (`fields`), the sections RL
and SFT configs share and loading a config file (`sections`).

Declarations only: imports `models` (the LoRA projection names) and nothing that runs.
"""
