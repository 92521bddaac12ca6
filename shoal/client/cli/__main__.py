"""``python -m shoal.client.cli`` is the ``shoal`` command."""

from shoal.client.cli.main import main

raise SystemExit(main())
