"""Networking: the listener, one protocol object per connection, frame buffers, and the
contract handlers answer through (``contract``), so handlers never import the connection.
"""
