"""AsyncAdmin (``client``): topics, configs, consumer and share groups. Its request bodies
and answers are sans-IO (``protocol``, ``group_protocol``); what it takes and returns is
in ``types``.
"""
