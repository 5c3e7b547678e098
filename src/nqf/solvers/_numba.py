"""The fused numba kernels of `nqf.kernels` (private; validated arguments only).

Imported on first use of a numba backend, so that ``import nqf`` and the JAX paths do not load
numba. See `nqf.solvers.kernels` for what each kernel computes, the backend choice and the
measurements.
"""

from __future__ import annotations

import math
import os

# numba's OpenMP threading layer spin-waits between parallel regions by default; on a machine
# with more runnable threads than cores (shared CI, other jobs) that made single evaluations up
# to 1000x slower (measured: p = 1000 diagonal RHS, 18 ms instead of 20 us). Passive waiting
# costs a few microseconds per region instead. Set before numba starts its threading layer;
# an explicit OMP_WAIT_POLICY from the user is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numba
import numpy as np
from numba import prange
from numba.core import types
from numba.extending import intrinsic

_CHUNK = 1 << 15  # elements per parallel task (a multiple of _BLOCK)
_BLOCK = 512  # elements per cache block inside a task (4 KiB of z stays in L1 across the m rows)
# reassoc: lets LLVM vectorize the reductions; contract: FMA. No nnan/ninf: the finiteness
# check below relies on NaN/inf propagating.
_FM = {"reassoc", "contract"}
# The decorator of the parallel kernels (one wrapper, applied to each: a Dispatcher per kernel).
_parallel_njit = numba.njit(parallel=True, fastmath=_FM, cache=True, nogil=True)


# --------------------------------------------------------------------------------------------
# numba kernels (private; validated arguments only)
# --------------------------------------------------------------------------------------------


# exp(x) = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 (Cody-Waite, |r| <= ln2 / 2), e^r by its
# Taylor polynomial of degree 13 (truncation < 1e-17 relative), 2^k by writing the exponent bits.
# Branch-free, so LLVM vectorizes it: numba's math.exp is a scalar libm call, ~4x slower here,
# and this is ~1.4x faster than numpy's AVX-512 exp (measured on 1e7 entries). Max relative
# error 2.2e-16 over [-708, 709] (tested), like numpy's and XLA's exp. Inputs outside
# [-700, 700] (and NaN, +-inf) are recomputed by libm's exp in a fix-up loop.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_C = tuple(1.0 / math.factorial(k) for k in range(14))


@intrinsic
def _i64_as_f64(typingctx, x):
    """Reinterpret the bits of an int64 as a float64 (no conversion)."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return sig, codegen


@numba.njit(fastmath=_FM, cache=True, nogil=True)
def _exp_into(x, out, n):
    """out[:n] = exp(x[:n])."""
    c = _EXP_C
    bad = 0
    for i in range(n):
        xi = x[i]
        bad += 0 if (xi >= -700.0 and xi <= 700.0) else 1
        xc = min(max(xi, -700.0), 700.0)
        k = math.floor(xc * _LOG2E + 0.5)
        r = (xc - k * _LN2_HI) - k * _LN2_LO
        q = c[13]
        q = q * r + c[12]
        q = q * r + c[11]
        q = q * r + c[10]
        q = q * r + c[9]
        q = q * r + c[8]
        q = q * r + c[7]
        q = q * r + c[6]
        q = q * r + c[5]
        q = q * r + c[4]
        q = q * r + c[3]
        q = q * r + c[2]
        q = q * r + c[1]
        q = q * r + c[0]
        out[i] = q * _i64_as_f64((np.int64(k) + 1023) << 52)
    if bad:
        for i in range(n):
            xi = x[i]
            if not (xi >= -700.0 and xi <= 700.0):
                out[i] = math.exp(xi)


@_parallel_njit
def _nb_delta(Lam, rows, v, y, log, mask, has_mask):
    """Pass 1: (Delta_j = sum_k Lam[rows[j], k] z_k - y[rows[j]] for every j, checksum).

    z = exp(v) if `log` else v; masked modes (mask False) count as z = 0. The checksum is the sum
    of v over live modes: non-finite iff (barring overflow) some live v is non-finite. Loops run
    on contiguous slices of one cache block (LLVM vectorizes those, not 2-d computed indices).
    """
    b = rows.shape[0]
    p = v.shape[0]
    nch = (p + _CHUNK - 1) // _CHUNK
    part = np.zeros((nch, b))
    chk = np.zeros(nch)
    for c in prange(nch):
        lo = c * _CHUNK
        hi = min(p, lo + _CHUNK)
        zb = np.empty(_BLOCK)
        s = 0.0
        for b0 in range(lo, hi, _BLOCK):
            n = min(hi - b0, _BLOCK)
            vb = v[b0 : b0 + n]
            if has_mask:
                mb = mask[b0 : b0 + n]
                if log:
                    _exp_into(vb, zb, n)
                else:
                    for i in range(n):
                        zb[i] = vb[i]
                for i in range(n):
                    live = mb[i]
                    s += vb[i] if live else 0.0
                    zb[i] = zb[i] if live else 0.0
                zz = zb[:n]
            elif log:
                _exp_into(vb, zb, n)
                for i in range(n):
                    s += vb[i]
                zz = zb[:n]
            else:
                for i in range(n):
                    s += vb[i]
                zz = vb
            # rows four at a time: five concurrent streams per loop keep more memory requests
            # in flight than one row at a time (measured 1.7x faster single-threaded)
            j = 0
            while j + 4 <= b:
                r0 = Lam[rows[j], b0 : b0 + n]
                r1 = Lam[rows[j + 1], b0 : b0 + n]
                r2 = Lam[rows[j + 2], b0 : b0 + n]
                r3 = Lam[rows[j + 3], b0 : b0 + n]
                a0 = 0.0
                a1 = 0.0
                a2 = 0.0
                a3 = 0.0
                for i in range(n):
                    zi = zz[i]
                    a0 += r0[i] * zi
                    a1 += r1[i] * zi
                    a2 += r2[i] * zi
                    a3 += r3[i] * zi
                part[c, j] += a0
                part[c, j + 1] += a1
                part[c, j + 2] += a2
                part[c, j + 3] += a3
                j += 4
            if j + 2 <= b:
                r0 = Lam[rows[j], b0 : b0 + n]
                r1 = Lam[rows[j + 1], b0 : b0 + n]
                a0 = 0.0
                a1 = 0.0
                for i in range(n):
                    zi = zz[i]
                    a0 += r0[i] * zi
                    a1 += r1[i] * zi
                part[c, j] += a0
                part[c, j + 1] += a1
                j += 2
            if j < b:
                r0 = Lam[rows[j], b0 : b0 + n]
                a0 = 0.0
                for i in range(n):
                    a0 += r0[i] * zz[i]
                part[c, j] += a0
        chk[c] = s
    delta = np.empty(b)
    for j in range(b):
        acc = 0.0
        for c in range(nch):
            acc += part[c, j]
        delta[j] = acc - y[rows[j]]
    total = 0.0
    for c in range(nch):
        total += chk[c]
    return delta, total


@_parallel_njit
def _nb_apply(Lam, rows, coef, c0, v, mode, mask, has_mask, out):
    """Pass 2: g_k = sum_j coef_j Lam[rows[j], k] + c0, then per mode
    0: out_k = g_k; 1: out_k = g_k v_k; 2: out_k = v_k (1 - g_k)^2. Masked modes: out_k = 0.
    `out` may be `v` itself (mode 2 updates z in place)."""
    b = rows.shape[0]
    p = v.shape[0]
    nch = (p + _CHUNK - 1) // _CHUNK
    for c in prange(nch):
        lo = c * _CHUNK
        hi = min(p, lo + _CHUNK)
        g = np.empty(_BLOCK)
        for b0 in range(lo, hi, _BLOCK):
            n = min(hi - b0, _BLOCK)
            for i in range(n):
                g[i] = c0
            j = 0
            while j + 4 <= b:
                r0 = Lam[rows[j], b0 : b0 + n]
                r1 = Lam[rows[j + 1], b0 : b0 + n]
                r2 = Lam[rows[j + 2], b0 : b0 + n]
                r3 = Lam[rows[j + 3], b0 : b0 + n]
                c0_, c1_, c2_, c3_ = coef[j], coef[j + 1], coef[j + 2], coef[j + 3]
                for i in range(n):
                    g[i] += (c0_ * r0[i] + c1_ * r1[i]) + (c2_ * r2[i] + c3_ * r3[i])
                j += 4
            if j + 2 <= b:
                r0 = Lam[rows[j], b0 : b0 + n]
                r1 = Lam[rows[j + 1], b0 : b0 + n]
                c0_, c1_ = coef[j], coef[j + 1]
                for i in range(n):
                    g[i] += c0_ * r0[i] + c1_ * r1[i]
                j += 2
            if j < b:
                r0 = Lam[rows[j], b0 : b0 + n]
                c0_ = coef[j]
                for i in range(n):
                    g[i] += c0_ * r0[i]
            vb = v[b0 : b0 + n]
            ob = out[b0 : b0 + n]
            if mode == 0:
                for i in range(n):
                    ob[i] = g[i]
            elif mode == 1:
                for i in range(n):
                    ob[i] = g[i] * vb[i]
            else:
                for i in range(n):
                    w = 1.0 - g[i]
                    ob[i] = vb[i] * (w * w)
            if has_mask:
                mb = mask[b0 : b0 + n]
                for i in range(n):
                    if not mb[i]:
                        ob[i] = 0.0


@_parallel_njit
def _nb_diag_rhs(lam, y, v, c1, c0, log, mask, has_mask, out):
    """One fused pass: r_k = c1 lam_k (lam_k z_k - y_k) + c0; out_k = r_k (log) or r_k z_k
    (masked: 0). Returns the checksum (sum of v over live modes)."""
    p = v.shape[0]
    nch = (p + _CHUNK - 1) // _CHUNK
    chk = np.zeros(nch)
    for c in prange(nch):
        lo = c * _CHUNK
        hi = min(p, lo + _CHUNK)
        zb = np.empty(_BLOCK)
        s = 0.0
        for b0 in range(lo, hi, _BLOCK):
            n = min(hi - b0, _BLOCK)
            vb = v[b0 : b0 + n]
            lb = lam[b0 : b0 + n]
            yb = y[b0 : b0 + n]
            ob = out[b0 : b0 + n]
            if log:
                _exp_into(vb, zb, n)
                for i in range(n):
                    ob[i] = c1 * lb[i] * (lb[i] * zb[i] - yb[i]) + c0
            else:
                for i in range(n):
                    ob[i] = (c1 * lb[i] * (lb[i] * vb[i] - yb[i]) + c0) * vb[i]
            if has_mask:
                mb = mask[b0 : b0 + n]
                for i in range(n):
                    live = mb[i]
                    s += vb[i] if live else 0.0
                    ob[i] = ob[i] if live else 0.0
            else:
                for i in range(n):
                    s += vb[i]
        chk[c] = s
    total = 0.0
    for c in range(nch):
        total += chk[c]
    return total


@_parallel_njit
def _nb_diag_gd(lam, y, z0, a, b, save_steps, zs):
    """Full-batch GD on diagonal data, all steps fused per cache block (coordinates decouple):
    z <- z (1 - (a lam (lam z - y) + b))^2, a = lr 4/p, b = lr gamma. Writes z after
    save_steps[s] steps into zs[s] (save_steps sorted, starting at 0); returns the full-batch
    loss at each save, shape (n_saves,)."""
    p = z0.shape[0]
    ns = save_steps.shape[0]
    nch = (p + _CHUNK - 1) // _CHUNK
    lossp = np.zeros((nch, ns))
    for c in prange(nch):
        lo = c * _CHUNK
        hi = min(p, lo + _CHUNK)
        zb = np.empty(_BLOCK)
        al = np.empty(_BLOCK)
        ay = np.empty(_BLOCK)
        for b0 in range(lo, hi, _BLOCK):
            n = min(hi - b0, _BLOCK)
            lb = lam[b0 : b0 + n]
            yb = y[b0 : b0 + n]
            for i in range(n):
                zb[i] = z0[b0 + i]
                al[i] = a * lb[i] * lb[i]  # lr h = a lam (lam z - y) + b = al z - ay
                ay[i] = a * lb[i] * yb[i] - b
            done = 0
            for s in range(ns):
                for _ in range(save_steps[s] - done):
                    for i in range(n):  # vectorized across the block, in L1 for all steps
                        w = 1.0 - (al[i] * zb[i] - ay[i])
                        zb[i] = zb[i] * (w * w)
                done = save_steps[s]
                zo = zs[s, b0 : b0 + n]
                acc = 0.0
                for i in range(n):
                    zo[i] = zb[i]
                    d = lb[i] * zb[i] - yb[i]
                    acc += d * d
                lossp[c, s] += acc
    loss = np.empty(ns)
    for s in range(ns):
        acc = 0.0
        for c in range(nch):
            acc += lossp[c, s]
        loss[s] = acc / p
    return loss


@numba.njit(fastmath=_FM, cache=True, nogil=True)
def _nb_diag_sgd(lam, y, zh, idx, lr, gamma, save_steps, zs):
    """Minibatch SGD on diagonal data; idx (steps, b) with sorted rows (repeats adjacent).

    Only the batch coordinates get the data term, h_k = (4/b) c_k lam_k (lam_k z_k - y_k) +
    gamma; every other coordinate is scaled by f = (1 - lr gamma)^2. That scaling is kept lazily
    as one number s (z = s zh, zh updated in place), so a step costs O(b), not O(p); s is folded
    into zh (O(p)) at saves and before it could underflow. Writes z at save_steps[s] into zs[s];
    returns the full-batch loss at each save."""
    steps, b = idx.shape
    p = zh.shape[0]
    ns = save_steps.shape[0]
    loss = np.empty(ns)
    kk = np.empty(b, dtype=np.int64)
    zn = np.empty(b)
    f = (1.0 - lr * gamma) ** 2
    sc = 1.0
    si = 0
    for n in range(steps + 1):
        if si < ns and save_steps[si] == n:
            acc = 0.0
            for k in range(p):
                zk = zh[k] * sc
                zh[k] = zk
                d = lam[k] * zk - y[k]
                acc += d * d
            sc = 1.0
            while si < ns and save_steps[si] == n:
                zs[si, :] = zh
                loss[si] = acc / p
                si += 1
        if n == steps:
            break
        ng = 0
        j = 0
        while j < b:  # group repeated entries (rows are sorted)
            k = idx[n, j]
            cnt = 1
            while j + cnt < b and idx[n, j + cnt] == k:
                cnt += 1
            lk = lam[k]
            zk = zh[k] * sc
            w = 1.0 - lr * ((4.0 / b) * cnt * lk * (lk * zk - y[k]) + gamma)
            kk[ng] = k
            zn[ng] = zk * (w * w)
            ng += 1
            j += cnt
        sc_new = sc * f
        if sc_new < 1e-200:  # fold the scale in (also covers f = 0, i.e. lr gamma = 1)
            for k in range(p):
                zh[k] *= sc_new
            sc_new = 1.0
        sc = sc_new
        for g in range(ng):
            zh[kk[g]] = zn[g] / sc
    return loss


def _dense_gd(Lam, y, z, idx, lr, gamma, save_steps, zs):
    """GD (idx None: all m rows every step) or minibatch SGD (rows idx[n]) on dense commuting
    data, in place on z: the two fused passes per step (a Python loop: ~20 us per step on top
    of the kernels, negligible at the sizes `auto` sends here). Returns the loss at each save."""
    m = Lam.shape[0]
    steps = save_steps[-1]
    all_rows = np.arange(m)
    dummy = np.ones(1, dtype=np.bool_)
    loss = np.empty(save_steps.shape[0])
    si = 0
    d_all = None
    for n in range(steps + 1):
        need_loss = si < len(save_steps) and save_steps[si] == n
        if need_loss or (idx is None and n < steps):
            d_all, _ = _nb_delta(Lam, all_rows, z, y, False, dummy, False)
        while si < len(save_steps) and save_steps[si] == n:
            assert d_all is not None  # computed above: need_loss holds here
            zs[si] = z
            loss[si] = float(d_all @ d_all) / m
            si += 1
        if n == steps:
            break
        if idx is None:
            assert d_all is not None  # computed above at every n < steps when idx is None
            rows, delta = all_rows, d_all
        else:
            rows = idx[n]
            delta, _ = _nb_delta(Lam, rows, z, y, False, dummy, False)
        coef = (lr * 4.0 / rows.shape[0]) * delta
        _nb_apply(Lam, rows, coef, lr * gamma, z, 2, dummy, False, z)
    return loss
