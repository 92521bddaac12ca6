"""``shoal``, the command line of the bundled client: the parser and entry point (``main``),
the data verbs (``data``), the admin verbs (``admin``) and the pure parts (``support``).
"""
