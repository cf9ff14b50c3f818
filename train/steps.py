"""The compiled pieces: optimizer, loss, one training step and one evaluation step.

Every function works on a stack of S models trained side by side (leading axis S on parameters,
optimizer state and batch) through jax.vmap; a single run is a stack of one. This is one code
path for the CPU (S = 1, one process per core) and for an accelerator (several seeds in one
compiled step). The batch axis is sharded over all local devices on the mesh axis "data";
parameters are replicated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from train.config import TrainConfig


def learning_rate_schedule(config: TrainConfig) -> optax.Schedule:
    """Linear warmup to the peak, then linear decay to zero at max_steps ("linear") or constant."""
    warmup = optax.linear_schedule(0.0, config.learning_rate, max(config.warmup_steps, 1))
    if config.schedule == "linear":
        after = optax.linear_schedule(config.learning_rate, 0.0, config.max_steps - config.warmup_steps)
    else:
        after = optax.constant_schedule(config.learning_rate)
    return optax.join_schedules([warmup, after], [config.warmup_steps])


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    return optax.adamw(learning_rate_schedule(config), b1=0.9, b2=0.999, eps=1e-8,
                       weight_decay=config.weight_decay)


def init_stack(models: list[nnx.Module], optimizer: optax.GradientTransformation):
    """(graphdef, rest, params_S, opt_state_S): models of one architecture as a stack of S for
    the vmapped steps (the parameters stacked along a leading axis, one optimizer state each)."""
    graphdef, _, rest = nnx.split(models[0], nnx.Param, ...)
    params_S = jax.tree.map(lambda *leaves: np.stack(leaves), *[nnx.split(m, nnx.Param, ...)[1] for m in models])
    return graphdef, rest, params_S, jax.vmap(optimizer.init)(params_S)


def data_mesh() -> Mesh:
    return Mesh(np.array(jax.local_devices()), ("data",))


def check_divisible(mesh: Mesh, batch_size: int, what: str) -> None:
    devices = mesh.devices.size
    if batch_size % devices:
        raise ValueError(f"{what}={batch_size} is not divisible by the {devices} local devices the batch "
                         f"is sharded over; choose a multiple of {devices}")


def shard_batch(mesh: Mesh, arrays: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """[S, B, T] arrays with B split over the 'data' axis."""
    sharding = NamedSharding(mesh, PartitionSpec(None, "data"))
    return {name: jax.device_put(array, sharding) for name, array in arrays.items()}


def replicate(mesh: Mesh, tree):
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def _logits(graphdef, params, rest, batch) -> jax.Array:
    model = nnx.merge(graphdef, params, rest)
    output = model(batch["tokens_BxT"], batch["positions_BxT"], batch["valid_BxT"])
    return output.logits_BxTxV


def _answer_scores(logits_BxTxV, batch):
    """(mean loss over answer tokens, token accuracy, per-sequence exact match)."""
    mask_BxT = batch["loss_mask_BxT"]
    log_probs_BxTxV = jax.nn.log_softmax(logits_BxTxV)
    nll_BxT = -jnp.take_along_axis(log_probs_BxTxV, batch["targets_BxT"][..., None], axis=-1)[..., 0]
    tokens = jnp.maximum(mask_BxT.sum(), 1.0)
    loss = (nll_BxT * mask_BxT).sum() / tokens
    right_BxT = jnp.argmax(logits_BxTxV, axis=-1) == batch["targets_BxT"]
    token_accuracy = (right_BxT * mask_BxT).sum() / tokens
    exact_B = jnp.all(right_BxT | (mask_BxT == 0), axis=1)
    return loss, token_accuracy, exact_B


def make_train_step(graphdef, rest, optimizer: optax.GradientTransformation):
    """step(params_S, opt_state_S, batch_S) -> (params_S, opt_state_S, loss_S, sequence_accuracy_S)."""

    def loss_fn(params, batch):
        loss, _, exact_B = _answer_scores(_logits(graphdef, params, rest, batch), batch)
        return loss, exact_B.mean()

    def one_model(params, opt_state, batch):
        (loss, sequence_accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, sequence_accuracy

    return jax.jit(jax.vmap(one_model), donate_argnums=(0, 1))


def make_eval_step(graphdef, rest):
    """eval(params_S, batch_S) -> exact_SxB: whole answer right under teacher forcing with argmax."""

    def one_model(params, batch):
        return _answer_scores(_logits(graphdef, params, rest, batch), batch)[2]

    return jax.jit(jax.vmap(one_model))
