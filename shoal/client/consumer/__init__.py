"""AsyncConsumer (``consumer``): subscriptions and positions (``subscription_state``), the
background fetcher, classic-group membership (``group``) and client-side assignors
(``assignors``).
"""
