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

from crasplab.train.config import TrainConfig
from crasplab.train.device import accelerator_path


def learning_rate_schedule(config: TrainConfig) -> optax.Schedule:
    """Linear warmup to the peak, then linear decay to zero at max_steps ("linear") or constant."""
    warmup = optax.linear_schedule(0.0, config.learning_rate, max(config.warmup_steps, 1))
    if config.schedule == "linear":
        after = optax.linear_schedule(config.learning_rate, 0.0, config.max_steps - config.warmup_steps)
    else:
        after = optax.constant_schedule(config.learning_rate)
    return optax.join_schedules([warmup, after], [config.warmup_steps])


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """AdamW, after clipping the gradient's global norm (over all of one model's parameters) to
    `max_grad_norm` when that is set: inside the vmapped step each model of a stack is clipped by
    its own norm, so a seed's numbers do not depend on the seeds trained beside it."""
    adamw = optax.adamw(learning_rate_schedule(config), b1=0.9, b2=0.999, eps=1e-8, weight_decay=config.weight_decay)
    if config.max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), adamw)
    return adamw


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
        raise ValueError(
            f"{what}={batch_size} is not divisible by the {devices} local devices the batch "
            f"is sharded over; choose a multiple of {devices}"
        )


def shard_batch(mesh: Mesh, arrays: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """[S, B, T] arrays (or [K, S, B, T]: K steps' batches) with B split over the 'data' axis."""
    leading = next(iter(arrays.values())).ndim - 2  # the axes before B
    sharding = NamedSharding(mesh, PartitionSpec(*(None,) * leading, "data"))
    return {name: jax.device_put(array, sharding) for name, array in arrays.items()}


def replicate(mesh: Mesh, tree):
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def _logits(graphdef, params, rest, batch) -> jax.Array:
    model = nnx.merge(graphdef, params, rest)
    output = model(batch["tokens_BxT"], batch["positions_BxT"], batch["valid_BxT"])
    return output.logits_BxTxV


def _answer_tokens(logits_BxTxV, batch):
    """(negative log-likelihood of each target, whether argmax hits it); both [B, T]."""
    log_probs_BxTxV = jax.nn.log_softmax(logits_BxTxV)
    nll_BxT = -jnp.take_along_axis(log_probs_BxTxV, batch["targets_BxT"][..., None], axis=-1)[..., 0]
    right_BxT = jnp.argmax(logits_BxTxV, axis=-1) == batch["targets_BxT"]
    return nll_BxT, right_BxT


def _answer_tokens_count(batch) -> jax.Array:
    return jnp.maximum(batch["loss_mask_BxT"].sum(), 1.0)


def _exact(right_BxT, mask_BxT) -> jax.Array:
    return jnp.all(right_BxT | (mask_BxT == 0), axis=1)


def _answer_scores(logits_BxTxV, batch):
    """(mean loss over answer tokens, token accuracy, per-sequence exact match)."""
    mask_BxT = batch["loss_mask_BxT"]
    nll_BxT, right_BxT = _answer_tokens(logits_BxTxV, batch)
    tokens = _answer_tokens_count(batch)
    loss = (nll_BxT * mask_BxT).sum() / tokens
    token_accuracy = (right_BxT * mask_BxT).sum() / tokens
    return loss, token_accuracy, _exact(right_BxT, mask_BxT)


# How many parts the from-scratch training step cuts a batch into on a CPU. Each part's forward
# and backward pass is its own chain of ops, and XLA runs the ops of one chain beside those of
# the other on a second core, where most of a small model's elementwise ops would otherwise run
# on one core alone: the quick step on two threads takes about 10% less time, on one pinned
# thread the same (measured in docs/calibration.md). An accelerator gets the whole
# batch in one part, which already fills it.
CPU_BATCH_PARTS = 2


def from_scratch_batch_parts() -> int:
    """The `batch_parts` of the from-scratch training step on this machine's path (crasplab.train.device)."""
    return 1 if accelerator_path() else CPU_BATCH_PARTS


def part_bounds(batch_size: int, parts: int) -> list[int]:
    """Row indices cutting a batch into `parts` consecutive parts of (nearly) equal size; a part
    is never empty, so a batch smaller than `parts` is cut into single rows."""
    parts = max(1, min(parts, batch_size))
    return [round(i * batch_size / parts) for i in range(parts + 1)]


def make_train_step(graphdef, rest, optimizer: optax.GradientTransformation, batch_parts: int = 1):
    """step(params_S, opt_state_S, batch_S) -> (params_S, opt_state_S, loss_S, sequence_accuracy_S).

    With batch_parts > 1 the gradient is the sum of the gradients of consecutive parts of the
    batch, each part's loss divided by the whole batch's answer tokens: the same function as
    one part, summed in another order (the numbers differ in the last digits)."""
    return jax.jit(jax.vmap(_model_step(graphdef, rest, optimizer, batch_parts)), donate_argnums=(0, 1))


def make_scanned_train_step(graphdef, rest, optimizer: optax.GradientTransformation, batch_parts: int = 1):
    """steps(params_S, opt_state_S, batches_KxS) -> (params_S, opt_state_S, loss_KxS, sequence_accuracy_KxS):
    the K steps of `make_train_step` on K batches sampled ahead (a leading step axis, padded to
    one width: crasplab.train.data.stack_steps) in one device call, a jax.lax.scan over them. On
    an accelerator each call costs a host round trip and a launch of every kernel; K steps per
    call pay them once."""
    step_S = jax.vmap(_model_step(graphdef, rest, optimizer, batch_parts))

    def steps(params_S, opt_state_S, batches_KxS):
        def one_step(state, batch_S):
            params_S, opt_state_S, loss_S, accuracy_S = step_S(*state, batch_S)
            return (params_S, opt_state_S), (loss_S, accuracy_S)

        (params_S, opt_state_S), (loss_KxS, accuracy_KxS) = jax.lax.scan(one_step, (params_S, opt_state_S), batches_KxS)
        return params_S, opt_state_S, loss_KxS, accuracy_KxS

    return jax.jit(steps, donate_argnums=(0, 1))


def _model_step(graphdef, rest, optimizer: optax.GradientTransformation, batch_parts: int):
    """One model's training step (params, opt_state, batch) -> (params, opt_state, loss, accuracy)."""

    def part_loss(params, part, tokens):
        mask_BxT = part["loss_mask_BxT"]
        nll_BxT, right_BxT = _answer_tokens(_logits(graphdef, params, rest, part), part)
        return (nll_BxT * mask_BxT).sum() / tokens, _exact(right_BxT, mask_BxT)

    def one_model(params, opt_state, batch):
        tokens = _answer_tokens_count(batch)
        bounds = part_bounds(batch["tokens_BxT"].shape[0], batch_parts)
        loss, grads, exact = 0.0, None, []
        for start, stop in zip(bounds, bounds[1:]):
            part = {name: array[start:stop] for name, array in batch.items()}
            (part_loss_value, part_exact_B), part_grads = jax.value_and_grad(part_loss, has_aux=True)(
                params, part, tokens
            )
            loss = loss + part_loss_value
            grads = part_grads if grads is None else jax.tree.map(jnp.add, grads, part_grads)
            exact.append(part_exact_B)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, jnp.concatenate(exact).mean()

    return one_model


def make_eval_step(graphdef, rest):
    """eval(params_S, batch_S) -> exact_SxB: whole answer right under teacher forcing with argmax."""

    def one_model(params, batch):
        return _answer_scores(_logits(graphdef, params, rest, batch), batch)[2]

    return jax.jit(jax.vmap(one_model))
