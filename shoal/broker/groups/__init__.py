"""Groups: classic consumer groups (and, later, share groups) and committed offsets."""
