"""Configuration: every broker, topic and group setting declared once (``keys`` and the
``*_keys`` tables), parsed into ``settings.BrokerConfig``, and the stored per-group
overrides (``group_configs``).
"""
