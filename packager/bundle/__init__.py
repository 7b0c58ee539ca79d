"""What an MNN bundle is and states: its kinds and files, graph facts, engines, checksums, staging."""
