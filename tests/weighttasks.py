"""The streaming converter's weight-writer tasks for a checkpoint (4 bits, blocks of 128): imported by the
streaming tests and by the process one of them starts and kills."""

from __future__ import annotations

from pathlib import Path

from packager.convert.stream import layout, weightwriter
from packager.convert.stream.quant import QuantSpec


def weight_tasks(checkpoint: Path) -> tuple[list[weightwriter.Task], int]:
    from packager.convert.inspect.checkpoint import inspect_checkpoint

    info = inspect_checkpoint(checkpoint)
    s = info.shape
    regions = layout.predict(
        s.hidden_size,
        s.num_layers,
        s.num_heads,
        s.num_kv_heads,
        s.head_dim,
        s.intermediate_size,
        s.vocab_size,
        QuantSpec(4, 128),
        family=info.family.layout,
    )
    tasks = weightwriter.plan(regions, weightwriter.index(info.weight_files), {}, {}, adapted=False)
    return tasks, layout.total_size(regions)
