"""Reading a checkpoint and its adapter before any conversion work."""
