"""The read-only web console on the operations HTTP listener (``/console``): views, pages, routes."""
