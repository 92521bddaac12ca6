"""Client-side assignors of the classic protocol (range, roundrobin, sticky), decision for
decision as Java's, over the subscription and assignment bytes members exchange.
"""
