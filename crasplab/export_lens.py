"""TransformerLens on a folder `python -m crasplab.export` wrote: hooks and caches on the lab's models.

    from crasplab.export_lens import transformer_lens_bridge
    bridge = transformer_lens_bridge("runs/hf/rope-uf")
    logits, cache = bridge.run_with_cache(bridge.to_tokens("<bos> a b <sep> a"))

TransformerLens 4 wraps a transformers model in a TransformerBridge (its HookedTransformer is gone);
the bridge gives that model's logits, so the lab's up to float32 rounding. Its own loader,
`TransformerBridge.boot_transformers(DIR)`, cannot take the export's tokenizer: it probes it by
encoding "a", and a word-level vocabulary without that symbol has no unknown token to give
(tokenizers raises "Missing [UNK] token"). This builds the same bridge around the model transformers
loads, with attention computed eagerly (as boot_transformers does, so hooks see the patterns), and
attaches the tokenizer as it is: the lab's strings carry their own <bos>, so nothing is prepended.

Needs transformer-lens (the `reference` extra, beside torch and transformers); imported here only.
"""

from __future__ import annotations

from pathlib import Path

from crasplab.export import ExportError


def transformer_lens_bridge(folder: Path | str):
    """A TransformerLens TransformerBridge of the exported model in `folder`, with its tokenizer."""
    try:
        import transformers
        from transformer_lens.model_bridge.sources import build_bridge_from_module
    except ImportError as error:
        raise ExportError(
            f"TransformerLens needs transformer-lens, torch and transformers ({error.name} is missing): "
            "pip install -e '.[reference]'"
        ) from None
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ExportError(
            f"{folder} holds no exported model (no config.json): write one with "
            "`python -m crasplab.export FOLDER --out DIR` and give DIR"
        )
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    architecture = model.config.architectures[0]
    bridge = build_bridge_from_module(model, architecture, hf_config=model.config, model_name=str(folder))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:  # a compiled program's alphabet has no <pad>: pad with <eos>, as TL does
        tokenizer.pad_token = tokenizer.eos_token
    bridge.tokenizer = tokenizer  # a first tokenizer is attached as given, without the probe
    bridge.cfg.default_prepend_bos = bridge.cfg.tokenizer_prepends_bos = bridge.cfg.tokenizer_appends_eos = False
    return bridge
