"""The per-layer listing of a compiled program: what every head and MLP step computes."""

from __future__ import annotations

from collections import defaultdict


def listing(compiled) -> str:
    c = compiled.config
    plural = lambda n, word: f"{n} {word}" + ("s" if n != 1 else "")  # noqa: E731
    lines = [
        f"{plural(c.n_layers, 'layer')}, {plural(c.n_heads, 'head')} of dimension {c.d_head}, d_model {c.d_model}, "
        f"d_ff {c.d_ff}, "
        f"{compiled.parameters:,} parameters ({compiled.pe}, strings up to {compiled.max_length} tokens)"
    ]
    by_layer = defaultdict(list)
    for head in compiled.heads:
        names = [compiled.features[head.group.channels[k][1]].name for k in head.channels]
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} values)" if len(names) > 4 else "")
        by_layer[head.layer].append(f"  head {head.index}: {head.group.label}: {shown}")
    for layer in range(c.n_layers):
        steps = [s for s in compiled.steps if s.layer == layer]
        lines.append(f"layer {layer}")
        lines += by_layer[layer] or ["  (no head)"]
        outputs = list(dict.fromkeys(compiled.features[s.output].name for s in steps))
        if outputs:
            shown = "; ".join(outputs[:6]) + (f"; ... ({len(outputs)} in all)" if len(outputs) > 6 else "")
            ramps = sum(s.ramp for s in steps)
            kinds = [plural(n, word) for n, word in ((len(steps) - ramps, "threshold step"), (ramps, "ramp")) if n]
            lines.append(f"  mlp: {' and '.join(kinds)}: {shown}")
        else:
            lines.append("  mlp: (nothing)")
    return "\n".join(lines)
