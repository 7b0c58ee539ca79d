"""Facts read from llm.mnn.json (the graph dump): sizes, layers, quantized linears and weight ranges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engine import has_c4_attention


@dataclass(frozen=True)
class Linear:
    name: str
    in_features: int
    out_features: int
    bits: int | None
    asymmetric: bool
    external: tuple[int, ...]
    shape_int32: bool = False  # the quant header stores the dims as int32 (a dim over 65535)
    scale_bytes: int = 4  # float32 scales (llmexport's, packager's); 2 where scaleStorage is FP16 (MNN's exporter)

    @property
    def block(self) -> int | None:
        """Block size implied by the alpha bytes: oc * (ic / block) * (2 if asymmetric) * scale_bytes bytes."""
        if self.bits is None or len(self.external) < 3 or self.external[2] == 0:
            return None
        per_row = self.external[2] // (self.out_features * (2 if self.asymmetric else 1) * self.scale_bytes)
        return self.in_features // per_row if per_row else None


@dataclass(frozen=True)
class GraphFacts:
    hidden_size: int | None
    layers: int
    linears: tuple[Linear, ...]
    ranges: tuple[tuple[str, int, int], ...]  # (op name, offset, length) into llm.mnn.weight
    c4: bool
    uuid: str | None
    norms: tuple[tuple[str, int, int], ...] = ()  # (op name, offset, length) of float32 norm weights

    @property
    def lm_head(self) -> Linear | None:
        named = [lin for lin in self.linears if "lm_head" in lin.name]
        return named[0] if named else (max(self.linears, key=lambda lin: lin.out_features) if self.linears else None)


def read(graph: dict[str, Any]) -> GraphFacts:
    ops = graph.get("oplists") or []
    hidden = None
    linears = []
    ranges = []
    norms = []
    layers = 0
    for op in ops:
        main = op.get("main") if isinstance(op.get("main"), dict) else {}
        if op.get("type") == "Input" and op.get("name") == "input_ids":
            dims = main.get("dims") or []
            hidden = dims[-1] if dims else None
        elif op.get("type") == "Attention":
            layers += 1
        external = main.get("external")
        if isinstance(external, list) and len(external) >= 2:
            ranges.append((str(op.get("name")), int(external[0]), int(sum(external[1:]))))
            if op.get("type") == "LayerNorm":
                norms.append(ranges[-1])
        if op.get("type") == "Convolution":
            common, quant = main.get("common") or {}, main.get("quanParameter")
            linears.append(
                Linear(
                    name=str(op.get("name")),
                    in_features=int(common.get("inputCount", 0)),
                    out_features=int(common.get("outputCount", 0)),
                    bits=int(quant["aMaxOrBits"]) if isinstance(quant, dict) and "aMaxOrBits" in quant else None,
                    asymmetric=bool(quant.get("aMin")) if isinstance(quant, dict) else False,
                    external=tuple(int(x) for x in external) if isinstance(external, list) else (),
                    shape_int32=bool(quant.get("shapeInt32")) if isinstance(quant, dict) else False,
                    scale_bytes=2 if isinstance(quant, dict) and quant.get("scaleStorage") == "FP16" else 4,
                )
            )
    return GraphFacts(
        hidden_size=hidden,
        layers=layers,
        linears=tuple(linears),
        ranges=tuple(ranges),
        c4=has_c4_attention(ops),
        uuid=graph.get("mnn_uuid"),
        norms=tuple(norms),
    )
