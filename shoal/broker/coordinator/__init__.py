"""Coordinators: event-sourced state on internal topics (see runtime.py)."""
