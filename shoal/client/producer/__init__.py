"""AsyncProducer (``producer``) and its sans-IO parts: the accumulator that batches, the
partitioner that picks a partition as Java does, and the per-record futures.
"""
