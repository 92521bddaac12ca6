"""Kafka-format JSON message specs: the single source of truth for every layout.

This directory is a package only so that the JSON files ship as package data
and can be found next to this module; nothing here is code. `shoal.protocol.spec`
loads the files.
"""
