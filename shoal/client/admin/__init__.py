"""AsyncAdmin (``client``): topics, configs, consumer and share groups, ACLs (``acls``). Its request bodies
and answers are sans-IO (``protocol``, ``group_protocol``); what it takes and returns is
in ``types``.
"""
