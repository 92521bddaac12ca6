"""SASL mechanisms' message formats and crypto, shared by the broker and the client.

Both ends of an exchange need the same parsing and the same key derivations
(RFC 5802 for SCRAM, RFC 4616 for PLAIN), so they live here, in the bottom
layer: the broker's authenticator and the client's handshake import them, and
neither imports the other. Everything is sans-IO and synchronous.
"""
