"""Share groups' membership (KIP-932) in the group coordinator: the ShareGroupHeartbeat state
machine (``group``, sans-IO), the server-side assignor (``assignor``), the records a group is
written as and replayed from (``records``), and the asyncio shell that runs them and starts
the share coordinator's Initialize/Delete calls (``service``).
"""
