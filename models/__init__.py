"""One decoder-only JAX/Flax-NNX transformer for the whole lab.

Build
-----
    from flax import nnx
    from crasplab.models import Transformer, ModelConfig, preset, parameter_count, forward_flops_per_token
    config = ModelConfig(vocab_size=len(task.vocab), d_model=256, n_layers=4, n_heads=4, d_ff=1024)
    config = preset("smollm2_135m")                       # the shape of a known pretrained model
    model = Transformer(config, rngs=nnx.Rngs(seed))      # same seed -> same parameters

Memory (models.memory): lower bounds of what a batch of a model holds in memory (training,
decoding), checked against the machine before a run folder is written.

Presets (models.PRESETS): the shapes of known pretrained models, by name (`list(PRESETS)`). The
from-scratch model sizes and the block each position encoding gets are train.config's
(`PRESETS["quick"].model.model_config(vocab_size, max_positions)`).
ModelConfig fields (its docstring says what each does): vocab_size, d_model, n_layers, n_heads,
d_ff, n_kv_heads (None: n_heads), d_head (None: d_model // n_heads), block (one of
models.config.BLOCKS), position (a code of models.positions.SCHEMES, the one table of the
position encodings and what each does to the model), max_positions (the rows of a learned
position table), rope_base, rope_dim (rotary dims per head; None: all), qkv_bias (Llama block
only, as Qwen2), sliding_window, global_every, rope_local_base (windowed layers, as Gemma 3),
tie_embeddings, norm_eps, dtype (one of models.config.DTYPES: the compute dtype; parameters,
softmax and logits stay float32), init_std. No dropout (the paper uses 0).

Forward
-------
    out = model(tokens_BxT, positions_BxT=None, mask_BxT=None, *, cache=None, interventions=None,
                return_attention=False, return_head_outputs=False)         # -> ModelOutput
    out.logits_BxTxV                 float32
    out.attention_LxBxHxTxS          softmax weights (None unless return_attention)
    out.head_outputs_LxBxTxHxK       per-head attention outputs before o (None unless asked)
    out.cache                        updated KVCache when one was passed
positions_BxT default to 0..T-1 (from cache.index when decoding); give them explicitly for APE
offsets or padding. mask_BxT: True for real tokens; masked tokens are never attended to (their
own outputs are meaningless). Causality follows the order tokens are fed (the cache slot), not
the position values. model.embed_inputs(tokens, positions) -> x_BxTxD and
model.forward_embeddings(x_BxTxD, positions, mask, ...) split the call (gradients w.r.t. inputs).

Out-of-range indices: an eager call raises ValueError when a token id is outside the vocabulary
or (APE) a position is outside [0, max_positions). Under jax.jit / nnx.jit the values are traced
and cannot be checked; there, such a lookup yields NaN embeddings (so NaN logits and loss) rather
than jnp's silent clipping. A NaN in a padded slot also poisons the batch (0 * NaN), so keep the
positions of padding inside the table too (e.g. 0).

Decoding
--------
    cache = model.init_cache(batch_size, length)      # KVCache; model(..., cache=cache).cache
    gen = generate(model, prompts_BxT, prompt_lengths_B, max_new_tokens=N, eos_id=EOS, pad_id=PAD,
                   interventions=None, use_cache=True)  # -> Generation(tokens_BxN, lengths_B)
Greedy, jit-compiled (one compile per graph, prompt width and N). Prompts are right-padded as
crasp.tasks makes them (ex.tokens with ex.prompt_lengths works: tokens after the prompt are
ignored); they are left-aligned inside, each row's positions start at 0, so a padded prompt gives
the tokens of that prompt alone. Stops at EOS (kept; pad_id after it) or N tokens.
gen.lengths_B counts generated tokens including EOS. use_cache=False recomputes full forward
passes (reference/baseline). For APE, longest prompt + N - 1 must not exceed max_positions.

Interventions (data, no hooks)
------------------------------
    Interventions(head_mask_LxH=None, head_mean_LxHxK=None, attn_bias_LxBxHxTxS=None)
head_mask 1 keeps a head, 0 replaces its output by head_mean (zeros when None);
mean_head_outputs(model, tokens, positions, mask) -> [L, H, K] means over a reference batch's
real tokens. attn_bias is added to layer l's logits, broadcast over B, H, T, S;
knockout_bias(edges_LxBxHxTxS) gives -inf on chosen query -> key edges (exactly zero weight).
models.analysis builds on them: per-head scores (induction, anti-induction, previous-token,
first-occurrence, first-position) on repeated random sequences, top-k and random-control head
sets, and mean or zero ablation as an Interventions value (experiments/mechanism.py).

Parameter tree (paths for set_params; kernels are [in, out] as in GPT-2's Conv1D, i.e. the
transpose of a torch nn.Linear weight)
--------------
    embed.embedding [V, D]                pos_embed.embedding [max_positions, D]   (learned table: APE)
    layers.{i}.attn_norm.{scale[, bias]}  layers.{i}.mlp_norm.{scale[, bias]}      (bias: GPT-2)
    layers.{i}.attn.q.kernel [D, H*K]     k.kernel, v.kernel [D, N*K]   o.kernel [H*K, D]
        .bias on q/k/v (GPT-2 or qkv_bias) and on o (GPT-2)
    layers.{i}.mlp.fc.kernel [D, F] .bias, mlp.proj.kernel [F, D] .bias          (GPT-2)
    layers.{i}.mlp.gate.kernel [D, F], mlp.up.kernel [D, F], mlp.down.kernel [F, D] (Llama)
    final_norm.{scale[, bias]}            lm_head.kernel [D, V]   (untied only)
Heads are contiguous blocks of K columns (head h = columns h*K:(h+1)*K); query head h uses kv
head h // (H/N), as Hugging Face. RoPE is the Hugging Face rotate_half (non-interleaved) layout
on the first rope_dim dims of each head: GGUF llama q/k rows must be un-permuted first.
tests/test_model_reference.py maps tiny Hugging Face Llama, Qwen2 and GPT-2 models onto these
paths and checks equal logits: a worked example for loaders.
    param_shapes(model) -> {path: shape};  set_params(model, {path: array}, require_all=False)
    count_params(model) == parameter_count(config)
forward_flops_per_token(config, context_length): forward FLOPs of one token attending to
context_length keys (multiply-add = 2).
"""

from crasplab.models.config import PRESETS, ModelConfig, forward_flops_per_token, parameter_count, preset
from crasplab.models.generate import Generation, generate
from crasplab.models.interventions import Interventions, knockout_bias, mean_head_outputs
from crasplab.models.params import count_params, param_shapes, set_params
from crasplab.models.positions import apply_rope
from crasplab.models.transformer import KVCache, ModelOutput, Transformer

__all__ = [
    "PRESETS",
    "ModelConfig",
    "forward_flops_per_token",
    "parameter_count",
    "preset",
    "Generation",
    "generate",
    "Interventions",
    "knockout_bias",
    "mean_head_outputs",
    "count_params",
    "param_shapes",
    "set_params",
    "KVCache",
    "ModelOutput",
    "Transformer",
    "apply_rope",
]
