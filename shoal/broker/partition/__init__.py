"""The data path's state: topics and their partitions (leader epoch, high watermark, the
append path onto the log), idempotent producer state and producer ids, and fetch sessions
(KIP-227).
"""
