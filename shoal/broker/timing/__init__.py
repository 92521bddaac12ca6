"""Time: the injectable clock, the hierarchical timing wheel, timers and the purgatory of
delayed operations (Kafka's ``DelayedOperationPurgatory`` with watch keys). Sans-IO but for
``timer``, which drives the wheel from the event loop.
"""
