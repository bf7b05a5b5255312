"""The episode driver: token-in/token-out conversations (`chat`), one episode of any `ToolEnv`
under SEET (`episode`), batched rollouts with the fast and slow loops (`loop`, returning a
`result`; through a
continuous-batching engine, no lock step: `engine_play`), rollouts into `TrajectoryBatch`es
(`batching`) and DPO pairs (`preferences`), multi-agent QA teams (`multi_agent`, `coordinator`,
`credit`).

Imports `envs`, `seet`, `rewards`, `sampling`, `models`, `tools` and `batch`; never `learner`
(the two meet only in `batch.py`), nor anything above.
"""
