"""The Kafka wire protocol, generated from ``shoal.schemas``: the bottom layer, shared by broker and client.

``spec`` loads the JSON specs; ``messages`` (built by ``message_factory``) and ``codegen`` turn them
into message classes and compiled encoders/decoders (``construct_codec`` is the readable construct version the fast path
is checked against); ``api`` is the table of every API and version; ``frames`` adds request and
response headers; ``records`` and ``record_sets`` are record batches (built, read, patched in
place) and legacy message sets; ``compression`` their codecs; ``errors`` the one table of error
codes (``error_table``) and ``ErrorCode``; ``stubgen`` writes ``messages.pyi`` and ``errors.pyi``, the types
checkers see for what is built at run time; ``error_responses`` builds Kafka's error answer for any request; ``coordinator_records``
the internal topics' record layouts; ``record_slice`` cuts a batch down to chosen records; ``constants``
Kafka's enumerated wire values (acknowledge types, record states, config and resource types, ...), which
nothing outside this package redefines (``tests/checks/test_wire_constants.py``).
Imports nothing else of Shoal.
"""
