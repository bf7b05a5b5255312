"""Where and how a run executes: the device mesh and its sharding rules (`sharding`), what the
processes of a multi-host run agree on (`sync`), what is built once per machine (`cache`).

Imports nothing of seetjax; every package above may use it.
"""
