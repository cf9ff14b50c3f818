"""The compute dtypes for tensor cores beside float32 and bfloat16 (crasplab.models.config.DTYPES):
tf32 and bfloat16-mixed, plumbed from the settings into every matrix product, kept float32 where
the recipe says so, and recorded by each run.

TF32 rounds the operands of float32 products to 10 mantissa bits on tensor cores only; on a CPU
XLA computes them in float32 whatever the precision asked, so here tf32 trains exactly as float32
does. What the CPU can show is that the precision reaches every product (the forward pass's and
the gradient's), that it changes nothing else, and that a run records it; whether TF32 trains the
same as float32 on a GPU is the dtype rule's question (benchmarks/paper_preset_dtypes.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from crasplab.records.job_folder import read_metrics
from crasplab.train.loop import Job, run_job
from crasplab.train.steps import init_stack, make_optimizer, make_train_step

from crasp.tasks import get_task
from tests.tiny import TINY_MODEL, tiny_config, tiny_model


def products(jaxpr) -> list:
    """Every dot_general of a jaxpr, inner jaxprs (jit, custom derivatives, scans) included."""
    found = []
    for equation in jaxpr.eqns:
        if equation.primitive.name == "dot_general":
            found.append(equation)
        for value in equation.params.values():
            for inner in value if isinstance(value, (list, tuple)) else [value]:
                if hasattr(inner, "jaxpr"):
                    found += products(inner.jaxpr if hasattr(inner.jaxpr, "eqns") else inner.jaxpr.jaxpr)
                elif hasattr(inner, "eqns"):
                    found += products(inner)
    return found


def loss_gradient_products(dtype: str) -> list:
    model = tiny_model(dtype=dtype)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 16, (2, 6)), jnp.int32)

    def loss(model):
        return model(tokens).logits_BxTxV.sum()

    return products(jax.make_jaxpr(jax.grad(loss))(model).jaxpr)


# The row sums of the norms and softmaxes: on a CPU, products with a column of ones at full
# precision whatever the model's dtype (models.rows).
ROW_SUMS = (jax.lax.Precision.HIGHEST,) * 2


def model_products(equations: list) -> list:
    return [equation for equation in equations if equation.params["precision"] != ROW_SUMS]


def test_tf32_reaches_every_product_of_the_forward_pass_and_the_gradient():
    tf32, float32 = loss_gradient_products("tf32"), loss_gradient_products("float32")
    assert len(tf32) == len(float32) > 10  # forward and backward products alike
    assert len(tf32) - len(model_products(tf32)) == len(float32) - len(model_products(float32)) > 0
    # jax names TensorFloat-32 Precision.HIGH; float32's products keep jax's default (None).
    assert {equation.params["precision"] for equation in model_products(tf32)} == {(jax.lax.Precision.HIGH,) * 2}
    assert {equation.params["precision"] for equation in model_products(float32)} == {None}


def test_bfloat16_mixed_multiplies_in_bfloat16_and_keeps_the_stream_and_logits_float32():
    """Every product of the model takes bfloat16 operands (the row sums of models.rows stay
    float32); the residual stream (the embedding's output), the norms' outputs and the logits are
    float32, where plain bfloat16 has a bfloat16 stream."""
    for equation in model_products(loss_gradient_products("bfloat16-mixed"))[:8]:  # the forward pass's come first
        assert all(var.aval.dtype == jnp.bfloat16 for var in equation.invars), equation
    tokens = jnp.zeros((1, 4), jnp.int32)
    mixed, plain = tiny_model(dtype="bfloat16-mixed"), tiny_model(dtype="bfloat16")
    assert mixed.embed_inputs(tokens, jnp.zeros_like(tokens)).dtype == jnp.float32
    assert plain.embed_inputs(tokens, jnp.zeros_like(tokens)).dtype == jnp.bfloat16
    assert mixed.layers[0].attn_norm(jnp.ones((1, 4, 32), jnp.float32)).dtype == jnp.float32
    assert mixed(tokens).logits_BxTxV.dtype == jnp.float32


@pytest.mark.parametrize("dtype", ["bfloat16-mixed", "tf32"])
def test_parameters_and_optimizer_state_stay_float32(dtype):
    task = get_task("UF", alphabet_size=8)
    optimizer = make_optimizer(tiny_config())
    model = TINY_MODEL.replace(dtype=dtype).build(len(task.vocab), 16, seed=0)
    graphdef, rest, params_S, opt_state_S = init_stack([model], optimizer)
    step = make_train_step(graphdef, rest, optimizer)
    batch = {
        "tokens_BxT": np.ones((1, 4, 8), np.int32),
        "positions_BxT": np.tile(np.arange(8, dtype=np.int32), (1, 4, 1)),
        "valid_BxT": np.ones((1, 4, 8), bool),
        "targets_BxT": np.ones((1, 4, 8), np.int32),
        "loss_mask_BxT": np.ones((1, 4, 8), np.float32),
    }
    params_S, opt_state_S, loss_S, _ = step(params_S, opt_state_S, batch)
    floats = [leaf for leaf in jax.tree.leaves((params_S, opt_state_S)) if jnp.issubdtype(leaf.dtype, jnp.floating)]
    assert floats and all(leaf.dtype == jnp.float32 for leaf in floats)
    assert loss_S.dtype == jnp.float32 and np.isfinite(np.asarray(loss_S)).all()


def test_each_choice_trains_a_job_end_to_end_and_the_job_records_it(tmp_path):
    """A tiny job in float32, tf32 and bfloat16-mixed: each trains to its step cap, its job.json
    names its dtype, and on this CPU tf32's records are float32's exactly (no tensor cores here)."""
    records = {}
    for dtype in ("float32", "tf32", "bfloat16-mixed"):
        job = Job(
            task_code="UR",
            seed=5,
            model=TINY_MODEL.replace(dtype=dtype),
            train=tiny_config(max_steps=8, eval_every=8, checkpoint_every=8),
            task_overrides=dict(alphabet_size=8),
            out_dir=str(tmp_path / dtype / "UR" / "seed5"),
        )
        run_job(job)
        assert job.files.read_job_values()["model"]["dtype"] == dtype
        assert job.files.read_result().steps == 8
        records[dtype] = read_metrics(job.files)
    assert records["tf32"] == records["float32"]
    losses = [r.loss for r in records["bfloat16-mixed"] if r.kind == "train"]
    assert len(losses) == 2 and np.isfinite(losses).all()
