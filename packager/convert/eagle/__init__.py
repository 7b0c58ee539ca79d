"""EAGLE-3 draft heads (MNN's `speculative_type: "eagle"`): a torch reference of what the exported head computes
(reference.py) and the exported graphs loaded from Python (mnn_head.py)."""
