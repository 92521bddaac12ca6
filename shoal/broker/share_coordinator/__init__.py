"""The share coordinator (KIP-932): share-partition state on ``__share_group_state``, as
Kafka's share-coordinator module keeps it. ``shard`` is the sans-IO shard (snapshots and
updates, replayed at load); ``service`` runs it on the coordinator runtime and answers the
Read/Write/Initialize/Delete share-group-state calls.
"""
