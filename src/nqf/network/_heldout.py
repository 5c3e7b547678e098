"""Held-out inputs: the outputs, loss and accuracy on inputs the network is not trained on.

The NQF gives every input's output from the order parameters (Eq. E2, Theorem 12):

    f_x(t) = f_x(0) + mu(t)^T g(x) + mu(t)^T B(x) mu(t) + Tr[M(t) A(x)],

so the NQF of the test inputs (`nqf.extract` on them, as `predict` extracts the training inputs)
read along the predicted (M(t), mu(t)) is the predicted test output at every saved time, at the
cost of the test inputs' traces. `nqf.record` measures the same with the module's own outputs at
the saved steps (inside its compiled program), and `nqf.compare` puts them side by side.

**Definitions** (fixed here, the same on both sides):

- test loss: the training loss's definition (`nqf.dynamics._losses.mean_loss`): the mean over
  the m_test inputs and k outputs of (f - y)^2;
- test accuracy (`accuracy_rule`): k > 1 outputs with integer class labels (m_test,) or one-hot
  rows (entries {0, 1} or {-1, +1}, one high entry per row): argmax over the k outputs;
  one output with labels in {-1, +1}: sign(f) = y (f = 0 counts as wrong); one output with
  labels in {0, 1}: (f > 0.5) = y; otherwise (real-valued regression targets) None. The rule is
  decided on the training and test labels together (all-ones labels count as {-1, +1}).
- shapes: outputs (n, m_test, k) for k > 1, (n, m_test) for one output (like `y`).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core import memory
from .._core._errors import NQFWarning
from ..data._model import as_model
from ..dynamics._losses import mean_loss
from ._departure import weights_along

__all__ = [
    "TestSet",
    "check_test",
    "accuracy_rule",
    "measures",
    "predicted_outputs",
    "module_outputs",
    "predicted",
    "recorded",
    "settings_of",
    "record_bytes",
    "compare_test",
]

_CHUNK_BYTES = 2.0**26  # workspace of one chunk of saved states in `predicted_outputs`


class TestSet(NamedTuple):
    """Checked held-out data: inputs `x` (pytree, leading axis m), labels `y` (m, k) or None,
    the labels as given `labels`, the number of inputs `m`, the accuracy rule `rule`."""

    x: object
    y: jax.Array | None
    labels: np.ndarray | None
    m: int
    rule: str | None
    loss: Any = None


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def check_test(net, x, y_given, y2, x_test, y_test, ell=None) -> TestSet | None:
    """`x_test`, `y_test` checked against the training data: the same pytree structure and
    per-input shape as `x` (already checked), labels of the form of `y` (`y_given` as the user
    gave it, `y2` (m, k)): (m_test,) or (m_test, k). None without `x_test`. `ell`: the training
    loss (`nqf.dynamics._losses.PerSampleLoss`; None: MSE), whose label rows (one-hot classes for
    cross-entropy, signs for logistic) the test loss reads.

    **Raises:** `ValueError` naming `y_test` (given without `x_test`, another k or length, not
    finite) or `x_test` (another structure or per-input shape, no inputs, not finite)."""
    if x_test is None:
        if y_test is not None:
            raise ValueError("`y_test` was given without `x_test`: pass the held-out inputs `x_test` too.")
        return None
    leaves, tree = jax.tree_util.tree_flatten(x)
    leaves_t, tree_t = jax.tree_util.tree_flatten(x_test)
    if tree_t != tree:
        raise ValueError(f"`x_test` must have the structure of `x` ({tree}); found {tree_t}.")
    for i, (a, b) in enumerate(zip(leaves, leaves_t)):
        if np.ndim(b) == 0 or np.shape(b)[1:] != np.shape(a)[1:]:
            raise ValueError(
                f"`x_test` must have the per-input shape of `x`: leaf {i} of `x` is {_shape_str(np.shape(a)[1:])} "
                f"per input; found {_shape_str(np.shape(b)[1:]) if np.ndim(b) else 'a scalar'} in `x_test`."
            )
        if np.issubdtype(np.asarray(b).dtype, np.number) and not np.all(np.isfinite(np.asarray(b))):
            raise ValueError(f"`x_test` must be finite; leaf {i} has non-finite entries.")
    ms = {int(np.shape(b)[0]) for b in leaves_t}
    if len(ms) != 1 or 0 in ms:
        raise ValueError(
            f"Every leaf of `x_test` must have the same leading batch axis m_test >= 1; found {sorted(ms)}."
        )
    m_test = ms.pop()
    x_test = net.check_inputs(x_test)
    if y_test is None:
        return TestSet(x_test, None, None, m_test, None)
    labels = np.asarray(y_test)
    k = int(y2.shape[1])
    given = np.shape(y_given)[1:]
    ok = (m_test, *given) == labels.shape or (k == 1 and labels.shape in ((m_test,), (m_test, 1)))
    if not ok:
        raise ValueError(
            f"`y_test` must have shape {_shape_str((m_test, *given))} like `y` (m_test = {m_test} inputs in "
            f"`x_test`, k = {k} module outputs); found {_shape_str(labels.shape)}."
        )
    if not np.all(np.isfinite(labels.astype(float))):
        raise ValueError("`y_test` must be finite.")
    rule = accuracy_rule(np.asarray(y_given), labels, k)
    if ell is not None and not ell.is_mse:  # the loss's label rows (m_test, k), checked by the loss
        return TestSet(x_test, jnp.asarray(ell.targets(labels, m_test, k)), labels, m_test, rule, ell)
    return TestSet(x_test, _mse_labels(labels, k), labels, m_test, rule)


def _mse_labels(labels, k: int):
    """The labels as the MSE reads them, (m, k), or None (class indices of a k > 1 output module)."""
    labels = np.asarray(labels, dtype=float)
    if labels.shape[1:] == (k,) or (labels.ndim == 1 and k == 1):
        return jnp.asarray(labels.reshape(labels.shape[0], k))
    return None


def accuracy_rule(y_train, y_test, k: int) -> str | None:
    """How test accuracy is read (module docstring): ``"class"`` (integer labels, argmax),
    ``"onehot"`` (argmax of both), ``"sign"``, ``"threshold"`` or None (regression)."""
    both = np.concatenate([np.asarray(y_train, float).reshape(-1), np.asarray(y_test, float).reshape(-1)])
    y_test = np.asarray(y_test, dtype=float)
    if k > 1:
        if y_test.ndim == 1:
            ints = np.all(both == np.round(both)) and both.min() >= 0 and both.max() < k
            return "class" if ints else None
        rows = np.concatenate([np.asarray(y_train, float).reshape(-1, k), y_test.reshape(-1, k)])
        for lo, hi in ((0.0, 1.0), (-1.0, 1.0)):
            if np.all((rows == lo) | (rows == hi)) and np.all(np.sum(rows == hi, axis=1) == 1):
                return "onehot"
        return None
    values = set(np.unique(both).tolist())
    if values <= {-1.0, 1.0}:
        return "sign"
    if values <= {0.0, 1.0}:
        return "threshold"
    return None


def _accuracy(F, labels, rule: str):
    """Accuracy (n,) of outputs F (n, m, k) against `labels` as given, by `rule`."""
    F = np.asarray(F)
    if rule == "sign":
        return np.mean(np.sign(F[:, :, 0]) == labels.reshape(1, -1), axis=1)
    if rule == "threshold":
        return np.mean((F[:, :, 0] > 0.5) == (labels.reshape(1, -1) == 1), axis=1)
    want = labels.astype(int) if rule == "class" else np.argmax(labels, axis=1)
    return np.mean(np.argmax(F, axis=2) == want[None], axis=1)


def measures(F, test: TestSet):
    """(outputs as stored, test loss (n,) or None, test accuracy (n,) or None) from the outputs
    F (n, m_test, k) at the saved times."""
    F = np.asarray(F, dtype=float)
    out = F[:, :, 0] if F.shape[2] == 1 else F
    if test.labels is None:
        return out, None, None
    y = test.y
    if y is None:  # labels the MSE does not take (class indices for k > 1 outputs)
        loss = None
    else:
        if test.loss is None:
            loss = np.asarray(jax.vmap(lambda f: mean_loss("mse", f, y))(jnp.asarray(F)))
        else:  # the training loss on its label rows
            loss = np.asarray(jax.vmap(lambda f: test.loss.mean(f, y))(jnp.asarray(F)))
    acc = None if test.rule is None else _accuracy(F, test.labels, test.rule)
    return out, loss, acc


@eqx.filter_jit
def _outputs(model, M, mu):
    return jax.vmap(model.outputs)(M, mu)


def _mu_along(traj, W0, n: int):
    """mu(t) (n, p) at the saved times: the trajectory's own, else W(t) 1 from the NQF's weights."""
    mu = getattr(traj, "mu", None)
    if mu is not None:
        return np.asarray(mu)
    path = weights_along(traj, W0)
    return None if path is None else np.stack([np.asarray(path(i)).sum(axis=1) for i in range(n)])


def predicted_outputs(model_test, traj, W0, k: int):
    """f_x(t) (n, m_test, k) of the test inputs' NQF `model_test` along the saved states of
    `traj` (a `FlowSolution` or `MapTrajectory`), in chunks of saved states.

    **Raises:** `nqf.memory.MemoryBudgetError` before allocating outputs over the budget;
    `ValueError` when the test inputs' NQF has a mean-field term (g, B) and the trajectory
    carries neither mu(t) nor W(t)."""
    model = as_model(model_test)
    M = np.asarray(traj.M)
    n, p = M.shape[0], M.shape[1]
    rows = model.m
    memory.check(
        8.0 * n * rows * (2 + p),
        f"predict: the outputs of {rows // k} test inputs x {k} outputs at {n} saved states",
        "fewer saves (`save_every`, `ts`), fewer test inputs, or NQF_MEMORY_BUDGET.",
    )
    mu = _mu_along(traj, W0, n) if model.has_mean_field else None
    if mu is None:
        if model.has_mean_field:
            raise ValueError(
                "`x_test`: the NQF of the test inputs has a linear or mean-field term (g, B) that the training "
                "inputs' does not, and this trajectory carries neither mu(t) nor W(t)."
            )
        mu = np.zeros((n, p))
    chunk = int(max(1, min(n, _CHUNK_BYTES // (8.0 * rows * (p + 1)))))
    out = []
    for i in range(0, n, chunk):
        Mi, mui = M[i : i + chunk], mu[i : i + chunk]
        short = chunk - len(Mi)
        if short:  # one shape for every chunk: one compiled program
            Mi = np.concatenate([Mi, np.repeat(Mi[-1:], short, axis=0)])
            mui = np.concatenate([mui, np.repeat(mui[-1:], short, axis=0)])
        out.append(np.asarray(_outputs(model, jnp.asarray(Mi), jnp.asarray(mui)))[: chunk - short])
    return np.concatenate(out).reshape(n, -1, k)


def module_outputs(net, params, x_test):
    """The module's own outputs (m_test, k) on `x_test` at `params` (traceable: `record`'s program)."""
    return jax.vmap(lambda xx: jnp.atleast_1d(net.apply(params, xx)).reshape(-1))(x_test)


def _as3(F):
    F = np.asarray(F, dtype=float)
    return F[:, :, None] if F.ndim == 2 else F


def _at(tp, F, t):
    """F (n_p, ...) linearly interpolated in time from times `tp` to times `t` (inside [tp0, tp-1])."""
    j = np.clip(np.searchsorted(tp, t, side="right") - 1, 0, len(tp) - 2)
    w = np.clip((t - tp[j]) / (tp[j + 1] - tp[j]), 0.0, 1.0).reshape(-1, *([1] * (F.ndim - 1)))
    return (1 - w) * F[j] + w * F[j + 1]


def compare_test(prediction, recording, t, inside, in_phase):
    """(test gap (n,) or None, the summary's "test" entry or None) of `compare`: the predicted
    test outputs linearly interpolated in t at the measured times `t` (exact where the save grids
    coincide), their loss and accuracy by the definitions above, against the recording's.

    - ``test_loss_gap``: max over the learning phase (`in_phase`) of |L_meas - L_pred| / L_pred(0)
      (test losses); ``final_test_loss``: (predicted, measured) at the last measured time inside
      the horizon;
    - ``test_accuracy_difference``: max |acc_meas - acc_pred| over the phase and ``at_end``; the
      accuracies at the end (None where the labels are not classes).

    **Raises:** `ValueError` when the recording's test inputs are not the prediction's (another
    m_test or k)."""
    Fp = getattr(prediction, "test_outputs", None)
    Fm = getattr(recording, "test_outputs", None)
    if Fp is None or Fm is None:
        if Fp is not None:
            warnings.warn(
                "compare: the prediction has held-out outputs and the recording none (record(..., x_test=, "
                "y_test=), or Prediction.record): no 'test' entry.",
                NQFWarning,
                stacklevel=3,
            )
        return None, None
    Fp, Fm = _as3(Fp), _as3(Fm)
    if Fp.shape[1:] != Fm.shape[1:]:
        raise ValueError(
            f"The recording's held-out outputs {Fm.shape[1:]} (m_test, k) are not the prediction's {Fp.shape[1:]}: "
            "record on the prediction's `x_test`."
        )
    labels = prediction.y_test
    if labels is None:
        return None, {"m_test": int(Fp.shape[1]), "note": "no test labels (y_test): outputs only"}
    rule = prediction.settings.get("test", {}).get("accuracy")
    test = TestSet(None, _mse_labels(labels, Fp.shape[2]), np.asarray(labels), Fp.shape[1], rule)
    tp = np.asarray(prediction.t, dtype=float)
    Fp_t = _at(tp, Fp, np.where(inside, t, tp[-1]))
    _, lp, ap = measures(Fp_t, test)
    _, lm, am = measures(Fm, test)
    lp0 = measures(Fp[:1], test)[1]
    last = np.flatnonzero(inside)[-1]
    entry: dict = {"m_test": int(Fp.shape[1]), "accuracy_rule": test.rule}
    gap = None
    if lp is not None and lm is not None and lp0 is not None:
        gap = np.where(inside, np.abs(lm - lp) / float(lp0[0]), np.nan)
        entry.update(
            test_L0=float(lp0[0]),
            test_loss_gap=float(np.max(gap[in_phase])) if in_phase.any() else float("nan"),
            final_test_loss={"predicted": float(lp[last]), "measured": float(lm[last])},
        )
    if ap is not None and am is not None:
        diff = np.abs(am - ap)
        entry["test_accuracy_difference"] = {
            "max_over_phase": float(np.max(diff[in_phase])) if in_phase.any() else float("nan"),
            "at_end": float(diff[last]),
        }
        entry["final_test_accuracy"] = {"predicted": float(ap[last]), "measured": float(am[last])}
    return gap, entry


def predicted(test: TestSet | None, extract_test, traj, W0, k: int) -> dict:
    """`Prediction`'s held-out fields (none without `x_test`): `extract_test(x, y)` extracts the
    NQF of the test inputs as `predict` extracts the training inputs' (`_predict._extract`)."""
    if test is None:
        return {}
    model_test = extract_test(test.x, test.y if test.y is not None else jnp.zeros((test.m, k)))
    out, loss, acc = measures(predicted_outputs(model_test, traj, W0, k), test)
    x = jax.tree_util.tree_map(np.asarray, test.x)
    return dict(test_outputs=out, test_loss=loss, test_accuracy=acc, x_test=x, y_test=test.labels)


def settings_of(test: TestSet | None) -> dict | None:
    """``settings["test"]``: the number of test inputs and the accuracy rule (None without them)."""
    return None if test is None else {"m_test": test.m, "accuracy": test.rule, "labels": test.labels is not None}


def record_bytes(test: TestSet | None, n_saves: int, k: int) -> float:
    """Bytes of `record`'s saved test outputs (n_saves, m_test, k)."""
    return 0.0 if test is None else 8.0 * n_saves * test.m * k


def recorded(test: TestSet | None, outputs: tuple) -> dict:
    """`Recording`'s held-out fields from the program's saved test outputs (`outputs` = (F,) with
    F (n, m_test, k), or () without `x_test`)."""
    if test is None:
        return {}
    return dict(zip(("test_outputs", "test_loss", "test_accuracy"), measures(outputs[0], test)))
