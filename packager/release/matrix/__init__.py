"""A matrix release run here: its journal (resumable), its jobs in a process pool, its summary and collection."""
