"""AsyncShareConsumer (KIP-932): the asyncio shell (``consumer``, ``fetcher``) over sans-IO
parts: acknowledgements held and owed (``acks``), share-session epochs and request bodies
(``session``) and the heartbeat state machine (``membership``).
"""
