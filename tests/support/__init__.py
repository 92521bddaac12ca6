"""Helpers shared by the test folders: brokers, raw wire calls, client helpers, strategies."""
