"""A classic consumer group from the member's side: the JoinGroup/SyncGroup/Heartbeat state
machine (``membership``, sans-IO), its asyncio shell (``coordinator``), committed offsets
(``offsets``) and the connection to the group coordinator (``link``).
"""
