"""One description of a training run: `nqf.SGD` (the discrete map) and `nqf.Flow` (gradient flow).

A training description says what training the user runs: the optimizer's hyperparameters, the
horizon, the batches and the loss. `nqf.predict` and `nqf.record` take the same description, so
the prediction and the measurement cannot describe different runs (`record` builds its optax
optimizer from it: `optax.sgd` with the schedule and momentum after `optax.add_decayed_weights`),
and so do `nqf.closed_sgd`, `nqf.closed_sgd_sweep` and `nqf.map_term` (their keywords are the
fields of `SGD`).

Time is gradient-flow time: step n of a run with learning rates lr_0, lr_1, ... is at
t_n = lr_0 + ... + lr_{n-1} (= lr * n for a constant rate), the time at which the flow of
`nqf.Flow` is compared with it.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from .._core._checks import check_positive, is_traced
from ._train_args import check_count, check_hyper, check_momentum, check_nesterov, check_rates, check_weight_decay

__all__ = ["SGD", "Flow", "step_times", "accepts_training"]


def _check_loss(loss):
    """`loss` of a description: a name of `nqf.dynamics._losses.LOSSES`, a callable ell(f, y) of one
    input or a `PerSampleLoss` (resolved, and a callable traced, where the number of outputs k is
    known: `predict`, `record`, `as_loss(loss, k)`)."""
    from ._losses import LOSSES, PerSampleLoss

    if isinstance(loss, str):
        if loss.lower().replace("-", "_") not in LOSSES:
            raise ValueError(f"`loss` must be one of {LOSSES} or a callable ell(f, y) -> scalar; found {loss!r}.")
        return loss
    if isinstance(loss, PerSampleLoss) or callable(loss):
        return loss
    raise TypeError(f"`loss` must be one of {LOSSES} or a callable ell(f, y) -> scalar; found {type(loss).__name__}.")


def _schedule_values(lr, steps: int | None) -> np.ndarray:
    """The per-step learning rates (steps,) of an optax schedule (a callable of the step count)
    or a per-step array, checked: finite, >= 0, not all zero."""
    if callable(lr):
        if steps is None:
            raise ValueError(
                "`lr` is a schedule (a callable of the step count): give `steps`, the number of steps it runs for."
            )
        try:
            values = np.asarray(jax.vmap(lr)(jnp.arange(steps)), dtype=float)
        except Exception as err:  # noqa: BLE001  (report any failure of the user's schedule)
            raise TypeError(
                f"`lr`: the schedule must map a step count (int array) to a learning rate; calling it on "
                f"0..{steps - 1} failed with {type(err).__name__}: {err}"
            ) from err
        if values.shape != (steps,):
            raise ValueError(f"`lr`: the schedule must return one scalar per step; found shape {values.shape}.")
        return check_rates(values, steps)
    return check_rates(lr, steps)


def step_times(lr, steps: int) -> Float[Array, " n"] | np.ndarray:
    """Gradient-flow times t_n = lr_0 + ... + lr_{n-1} of steps n = 0..steps, shape (steps + 1,);
    `lr` a scalar (t_n = lr n) or per-step rates (steps,). Works on traced values."""
    xp = jnp if is_traced(lr) else np
    if xp.ndim(lr) == 0:
        return lr * xp.arange(steps + 1)
    return xp.concatenate([xp.zeros(1), xp.cumsum(lr)])


class SGD(eqx.Module):
    """Stochastic gradient descent as the user runs it: the description `predict`, `record`,
    `closed_sgd`, `closed_sgd_sweep` and `map_term` share (Theorem 2, Corollary 2).

    ``SGD(lr, steps=None, *, t1=None, momentum=0.0, nesterov=False, weight_decay=0.0,
    batch_size=None, batch_indices=None, key=0, loss="mse")``

    **Arguments:**

    - `lr`: the learning rate: a scalar > 0; an optax schedule (a callable step -> rate, e.g.
      ``optax.warmup_cosine_decay_schedule(...)``: evaluated at steps 0..steps-1, so `steps` is
      needed); or per-step rates (steps,), finite and >= 0. A scalar may be a traced JAX value
      (e.g. under `jax.vmap` over learning rates in `closed_sgd`).
    - Horizon: `steps` (an integer >= 1), or `t1` (gradient-flow time; with a scalar lr
      steps = round(t1 / lr)). With per-step rates the run's time is t = sum of lr.
    - `momentum`: heavy-ball beta in [0, 1) (`torch.optim.SGD` / `optax.sgd` convention);
      `nesterov`: Nesterov momentum (needs beta > 0).
    - `weight_decay`: gamma >= 0, the penalty gamma/2 |W|^2 (`optax.add_decayed_weights`).
    - Batches: full batch (default); `batch_size` b drawn by `nqf.batch_indices` from `key` (an
      int seed or PRNG key); or `batch_indices` (steps, b) over the m inputs.
    - `loss`: ``"mse"`` (default) or another loss of `nqf.dynamics.as_loss` (a name or a
      JAX-traceable per-sample callable ell(f, y)).

    **Attributes** (besides the arguments): `n_steps` (int), `rates` (per-step rates (steps,)
    or the scalar), `t_final` (the horizon's gradient-flow time), `times` (steps + 1,).

    **Raises:** `ValueError` for lr <= 0 (a scalar), a schedule or array with a negative,
    non-finite or all-zero rate, an array whose length disagrees with `steps`, no horizon or
    both `steps` and `t1` inconsistent, momentum outside [0, 1), weight_decay < 0,
    `batch_size` and `batch_indices` both given, an unknown loss; `TypeError` for a schedule
    that does not map step counts to rates, or a `nesterov` that is not a bool.
    """

    lr: Any
    steps: int = eqx.field(static=True)
    momentum: Any
    weight_decay: Any
    nesterov: bool = eqx.field(static=True)
    batch_size: int | None = eqx.field(static=True)
    batch_indices: Any
    key: Any
    loss: Any = eqx.field(static=True)

    def __init__(
        self,
        lr: float | Float[ArrayLike, ""] | Float[ArrayLike, " steps"] | Callable[[Any], Any],
        steps: int | None = None,
        *,
        t1: float | None = None,
        momentum: float | Float[ArrayLike, ""] = 0.0,
        nesterov: bool = False,
        weight_decay: float | Float[ArrayLike, ""] = 0.0,
        batch_size: int | None = None,
        batch_indices: Int[ArrayLike, "steps b"] | None = None,
        key: PRNGKeyArray | int = 0,
        loss: str | Callable[[Array, Array], Array] = "mse",
    ):
        if steps is not None:
            steps = check_count(steps, "steps")
        scalar = is_traced(lr) or (not callable(lr) and np.ndim(lr) == 0)
        if scalar:
            lr = check_hyper(lr, "lr")
            if steps is None:
                if t1 is None:
                    raise ValueError("SGD needs a horizon: `steps` (an integer >= 1) or `t1` (gradient-flow time).")
                if is_traced(lr):
                    raise ValueError("SGD with a traced `lr` needs `steps` (t1 / lr would fix the program's length).")
                steps = max(1, int(round(check_positive(t1, "t1") / lr)))
            elif t1 is not None and not is_traced(lr) and not np.isclose(float(t1), lr * steps, rtol=1e-9):
                raise ValueError(f"`t1` = {t1!r} disagrees with lr x steps = {lr * steps:g}: give `steps` or `t1`.")
        else:
            if t1 is not None:
                raise ValueError("With a schedule or per-step `lr` give `steps`, not `t1` (t = sum of the rates).")
            lr = _schedule_values(lr, steps)
            steps = lr.shape[0]
        beta = check_momentum(momentum)
        if batch_size is not None and batch_indices is not None:
            raise ValueError("Give `batch_size` or `batch_indices`, not both.")
        if batch_size is not None:
            batch_size = check_count(batch_size, "batch_size")
        if batch_indices is not None:
            batch_indices = np.asarray(batch_indices)
            if batch_indices.ndim != 2 or batch_indices.shape[0] != steps:
                raise ValueError(
                    f"`batch_indices` must have shape (steps, b) = ({steps}, b); found {batch_indices.shape}."
                )
        self.lr = lr
        self.steps = int(cast(int, steps))
        self.momentum = beta
        self.nesterov = check_nesterov(nesterov, beta)
        self.weight_decay = check_weight_decay(weight_decay)
        self.batch_size = batch_size
        self.batch_indices = batch_indices
        self.key = key
        self.loss = _check_loss(loss)

    @property
    def n_steps(self) -> int:
        """The number of steps."""
        return self.steps

    @property
    def scheduled(self) -> bool:
        """Whether the learning rate changes from step to step."""
        return np.ndim(self.lr) == 1

    @property
    def times(self):
        """Gradient-flow times of steps 0..steps, (steps + 1,)."""
        return step_times(self.lr, self.steps)

    @property
    def t_final(self):
        """The horizon in gradient-flow time, sum of the per-step rates (lr * steps)."""
        return self.times[-1]

    @property
    def lr_max(self) -> float:
        """The largest per-step rate (the scalar lr without a schedule)."""
        return float(np.max(self.lr))

    @property
    def full_batch(self) -> bool:
        return self.batch_size is None and self.batch_indices is None

    def map_keywords(self) -> dict[str, Any]:
        """The keywords of `nqf.closed_sgd` this description stands for."""
        return dict(
            lr=self.lr,
            steps=self.steps,
            momentum=self.momentum,
            nesterov=self.nesterov,
            weight_decay=self.weight_decay,
            batch_size=self.batch_size,
            batch_indices=self.batch_indices,
            key=None if self.full_batch else self.key,
            loss=self.loss,
        )

    def optax(self):
        """The optax optimizer that runs this training on the module's own parameters:
        ``optax.chain(optax.add_decayed_weights(weight_decay), optax.sgd(schedule, momentum,
        nesterov))`` (no chain without weight decay). Needs optax."""
        import optax

        rate = self.lr
        if self.scheduled:
            values = jnp.asarray(self.lr)
            rate = lambda n: values[jnp.minimum(n, values.shape[0] - 1)]  # noqa: E731
        sgd = optax.sgd(rate, momentum=float(self.momentum) or None, nesterov=self.nesterov)
        if not float(self.weight_decay):
            return sgd
        return optax.chain(optax.add_decayed_weights(float(self.weight_decay)), sgd)

    def label(self) -> str:
        """A short name for tables and plot titles, e.g. ``"SGD(lr=0.1, steps=500, b=32)"``."""
        lr = f"schedule {self.lr_max:.3g} max" if self.scheduled else f"{float(self.lr):.3g}"
        parts = [f"lr={lr}", f"steps={self.steps}"]
        if float(self.momentum):
            parts.append(("nesterov " if self.nesterov else "momentum ") + f"{float(self.momentum):g}")
        if float(self.weight_decay):
            parts.append(f"wd={float(self.weight_decay):g}")
        if self.batch_size is not None:
            parts.append(f"b={self.batch_size}")
        if self.loss != "mse":
            parts.append(f"loss={self.loss if isinstance(self.loss, str) else 'custom'}")
        return "SGD(" + ", ".join(parts) + ")"


class Flow(eqx.Module):
    """Gradient flow dW/dt = -grad L(W), the limit of small learning rates: the description
    `predict` solves with `nqf.solve_flow` (Eq. E9/E10).

    ``Flow(t1, *, weight_decay=0.0, loss="mse")``: `t1` the horizon (gradient-flow time > 0);
    `weight_decay` gamma >= 0 (penalty gamma/2 |W|^2); `loss` as for `SGD`.

    **Raises:** `ValueError` for t1 <= 0 or not finite, weight_decay < 0, an unknown loss.
    """

    t1: float
    weight_decay: float
    loss: Any = eqx.field(static=True)

    def __init__(self, t1: float, *, weight_decay: float = 0.0, loss: str | Callable[[Array, Array], Array] = "mse"):
        self.t1 = check_positive(t1, "t1")
        self.weight_decay = check_positive(weight_decay, "weight_decay", allow_zero=True)
        self.loss = _check_loss(loss)

    @property
    def t_final(self) -> float:
        return self.t1

    def label(self) -> str:
        extra = f", wd={self.weight_decay:g}" if self.weight_decay else ""
        extra += f", loss={self.loss}" if self.loss != "mse" else ""
        return f"Flow(t1={self.t1:g}{extra})"


_MAP_FIELDS = ("lr", "steps", "momentum", "nesterov", "weight_decay", "batch_size", "batch_indices", "key", "loss")


def accepts_training(fn: Callable[..., Any] | None = None, *, schedules: bool = True) -> Any:
    """Let `fn(model, *, lr=, steps=, ...)` (`closed_sgd`, `closed_sgd_sweep`, `map_term`) also
    take an `SGD` as its second positional argument: its keywords come from the description (a
    keyword given twice is an error; a full-batch description takes a batch schedule beside it). `schedules=False`: `fn` takes a constant lr only, and a
    scheduled description is refused by name."""
    if fn is None:
        return functools.partial(accepts_training, schedules=schedules)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > 2:
            raise TypeError(f"{fn.__name__} takes the model and an optional nqf.SGD positionally; found {len(args)}.")
        model = args[0] if args else kwargs.pop("model")
        training = args[1] if len(args) == 2 else kwargs.pop("training", None)
        if training is None:
            return fn(model, **kwargs)
        if not isinstance(training, SGD):
            hint = " (nqf.Flow is solved by nqf.solve_flow)." if isinstance(training, Flow) else "."
            raise TypeError(
                f"{fn.__name__}: the second argument must be an nqf.SGD training description; found "
                f"{type(training).__name__}{hint}"
            )
        batches = {"batch_size", "batch_indices", "key"} if training.full_batch else set()
        both = sorted(set(kwargs) & (set(_MAP_FIELDS) - batches))
        if both:
            raise ValueError(
                f"{fn.__name__}: {', '.join(f'`{k}`' for k in both)} given both as keywords and in the SGD "
                "description: give each once."
            )
        if training.scheduled and not schedules:
            raise ValueError(
                f"{fn.__name__} takes a constant learning rate; this SGD has a schedule (per-step rates): "
                "run it with nqf.closed_sgd, which applies rate lr_n at step n."
            )
        return fn(model, **(training.map_keywords() | kwargs))

    sig = inspect.signature(fn)
    first, *rest = sig.parameters.values()
    training = inspect.Parameter(
        "training", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation="SGD | None"
    )
    wrapper.__signature__ = sig.replace(parameters=[first, training, *rest])  # type: ignore[attr-defined]
    return wrapper


_LEGACY = {
    "predict": ("t1", "lr", "steps", "batch_size", "batch_indices", "key", "momentum", "weight_decay"),
    "record": ("lr", "steps", "batch_size", "batch_indices", "key"),
}


def split_legacy(where: str, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the deprecated training keywords of `where` (`predict` / `record`) in its ``**options``
    catch-all, for `from_keywords`; the other options)."""
    legacy = {k: v for k, v in options.items() if k in _LEGACY[where]}
    return legacy, {k: v for k, v in options.items() if k not in legacy}


def from_keywords(where: str, training, legacy: dict[str, Any], stacklevel: int = 3) -> SGD | Flow | None:
    """The training description of `predict` / `record` (`where`): `training` itself, or one
    built from the keywords of earlier versions (`legacy`: lr=, steps=, t1=, batches, momentum,
    weight_decay), with a `DeprecationWarning` that names the description to pass instead.
    None when neither is given. **Raises:** `TypeError` for an unknown keyword or a `training`
    that is not a description; `ValueError` for a description and keywords together."""
    unknown = sorted(set(legacy) - set(_LEGACY[where]))
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}.")
    given = {k: v for k, v in legacy.items() if v is not None}
    if training is not None:
        if not isinstance(training, (SGD, Flow)):
            raise TypeError(
                f"{where}: `training` (the fourth argument) must be an nqf.SGD or nqf.Flow description; found "
                f"{type(training).__name__}."
            )
        if given:
            raise ValueError(
                f"{where}: {', '.join(f'`{k}`' for k in sorted(given))} given beside the training description "
                f"{training.label()}: put them in the description."
            )
        return training
    if not given:
        return None
    built: SGD | Flow
    if "lr" in given:
        built = SGD(**given)
    else:
        extra = sorted(
            set(given) - {"t1", "weight_decay", "momentum", "key"} | ({"momentum"} if given.get("momentum") else set())
        )
        if extra or where == "record":
            raise ValueError(
                f"{where}: {', '.join(f'`{k}`' for k in extra) or 'the keywords'} describe the discrete map: give "
                "`lr` too, i.e. pass nqf.SGD(lr, steps=...) (without a learning rate the prediction is the "
                "gradient flow nqf.Flow(t1=...))."
            )
        if "t1" not in given:
            raise ValueError("Give the horizon: nqf.Flow(t1=...) (gradient-flow time) or nqf.SGD(lr, steps=...).")
        built = Flow(given["t1"], weight_decay=given.get("weight_decay", 0.0))
    args = ", ".join(f"{k}={v!r}" for k, v in given.items() if not hasattr(v, "shape"))
    warnings.warn(
        f"{where}(..., {args}) is deprecated: pass the training description, {where}(net, x, y, "
        f"{built.label()}); these keywords will be removed in the next release.",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return built
