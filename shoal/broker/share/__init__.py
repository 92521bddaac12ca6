"""Share groups (KIP-932): partition assignment for groups whose members may share partitions."""
