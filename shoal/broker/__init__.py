"""The broker: an asyncio server in front of sans-IO cores, one ``Broker`` object holding them.

``broker.Broker`` owns everything (no global state); ``cli`` starts it; ``faults`` lets
the test kit fail or delay requests. The parts, by role: ``net`` (sockets and frames),
``handlers`` (one module per API family, one table), ``partition`` (topics, partitions,
producer state), ``log`` (segmented storage), ``groups`` (the group coordinator, share
groups' membership included), ``share`` (share partitions on the leader), ``share_coordinator``
(their durable state), ``coordinator`` (the coordinators' event-sourced runtime),
``timing`` (clocks, timers, purgatory) and ``config`` (every setting, declared once).
"""
