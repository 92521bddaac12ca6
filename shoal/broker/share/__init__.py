"""Share groups (KIP-932): share partitions on the leader (``share_partition`` and its in-flight
map ``in_flight``, sans-IO; the shell ``partition_manager``), share sessions, share-group
membership and assignment (``group``, ``assignor``; shell ``group_service``; records
``group_records``), dead-lettering, and the share coordinator on ``__share_group_state``
(``state``, the shard; ``coordinator``, its shell).
"""
