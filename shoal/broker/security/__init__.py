"""Who is asking, and what they may do: principals, authentication and authorization.

The cores here are plain objects (no asyncio, no sockets), driven by the
connection and the handlers: a SASL exchange is fed client tokens and answers
server tokens; an authorizer is asked (principal, operation, resource).
"""
