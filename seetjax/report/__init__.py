"""What a run writes for people: console lines (`console`), metrics.jsonl and TensorBoard
(`metrics`), training curves (`plots`), bootstrap intervals (`bootstrap`).

Imports nothing of seetjax; every package above may use it.
"""
