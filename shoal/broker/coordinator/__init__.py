"""The coordinator runtime: internal-topic partitions as event-sourced state, shared by the
group and share coordinators (operation -> records -> append -> replay, see ``runtime``;
``shard`` is what a sans-IO shard and the runtime agree on).
"""
