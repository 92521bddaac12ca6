"""The group coordinator on ``__consumer_offsets``: classic groups (``classic``, sans-IO),
committed offsets and the shard that holds them with the share groups (``shard``), share
groups' membership (``share``), and the asyncio coordinator that runs requests through the
coordinator runtime (``coordinator``).
"""
