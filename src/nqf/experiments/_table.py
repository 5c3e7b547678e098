"""Reproductions as tables: a figure declares its checks and claims as rows, one runner does the rest.

A reproduction is a `Reproduction`: a `measure` step that turns ``quick`` into a dict of measured
quantities, and pure functions of that dict that declare what the JSON holds, the `Check` rows
(name, value, bound), the `Claim` rows (name, paper statement, metric, value, criterion, verdict)
and the figure. `reproduce` runs the measurement, evaluates the rows into today's JSON records
(`nqf.experiments._common.check` / `claim`), draws the figure and writes ``NAME.png`` and
``NAME.json``; the CLI prints the tables from that JSON. A figure's ``run`` is then one call,
and the reader finds what is measured against what bound in the figure's ``_checks`` and
``_claims``.

JSON schema (unchanged from the hand-written runs): ``{"name", "title", "quick", <the keys
`report` returns>, "checks": [check records], "claims": [claim records], "png", "json"}``;
``wall_time_s["total"]`` is set by the runner when `report` returns ``wall_time_s`` as a dict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._common import check, claim, prepare_out_dir, write_outputs


@dataclass(frozen=True)
class Check:
    """One check row: the package's own correctness, passed iff `value` <= `bound`.

    `name` says what is measured against what (the reference is the check's source, e.g. "flow vs
    Theorem 5"); `value` and `bound` are numbers (a NaN value fails). `record()` is the JSON
    record ``{"name", "value", "bound", "passed"}`` (`nqf.experiments._common.check`).
    """

    name: str
    value: Any
    bound: Any

    def record(self) -> dict:
        return check(self.name, self.value, self.bound)


@dataclass(frozen=True)
class Claim:
    """One claim row: a statement of the paper, its metric, the measured value and the verdict.

    Fields as the arguments of `nqf.experiments._common.claim` (`text` the paper's statement,
    `section` where it is made, `holds` whether `value` meets `criterion`, `setting` "paper" or
    "package-chosen", `why` the measured cause, `expected` False where the claim is not expected
    at this setting, `revised` True for a criterion fixed in issue 15). `record()` is the JSON
    record (with its verdict); it raises `ValueError` for an unknown `setting`.
    """

    name: str
    text: str
    section: str
    metric: str
    value: Any
    criterion: str
    holds: bool
    setting: str
    why: str
    expected: bool = True
    revised: bool = False

    def record(self) -> dict:
        return claim(
            self.name,
            self.text,
            self.section,
            metric=self.metric,
            value=self.value,
            criterion=self.criterion,
            holds=self.holds,
            setting=self.setting,
            why=self.why,
            expected=self.expected,
            revised=self.revised,
        )


Measured = dict[str, Any]
"""The measured quantities of one run: whatever `Reproduction.measure` returns."""


@dataclass(frozen=True)
class Reproduction:
    """A figure's reproduction as data (module docstring).

    - `name`, `title`: the figure's NAME and TITLE (the JSON's ``name`` and ``title``).
    - `measure(quick) -> Measured`: the computation.
    - `report(q) -> dict`: the JSON's keys other than name/title/quick/checks/claims, in order
      (``settings``, the measured blocks, ``wall_time_s``, ``chosen_settings``, ``sensitivity``).
    - `checks(q) -> list[Check]`, `claims(q) -> list[Claim]`: the rows.
    - `plot(q) -> Figure`: the figure (a matplotlib Figure).
    """

    name: str
    title: str
    measure: Callable[[bool], Measured]
    report: Callable[[Measured], dict]
    checks: Callable[[Measured], list[Check]]
    claims: Callable[[Measured], list[Claim]]
    plot: Callable[[Measured], Any]


def reproduce(rep: Reproduction, out_dir, quick: bool) -> dict:
    """Run `rep` (a `Reproduction`) into `out_dir`: measure, evaluate the check and claim rows,
    plot, and write ``out_dir/NAME.png`` and ``out_dir/NAME.json``; return the JSON dict.

    `quick` is passed to ``rep.measure`` (the measured dict carries it on to the other steps).
    **Raises:** `NotADirectoryError` if `out_dir` exists and is not a directory; `ValueError` for a
    claim row with an unknown setting.
    """
    t_start = time.perf_counter()
    out = prepare_out_dir(out_dir)
    q = rep.measure(bool(quick))
    checks = [row.record() for row in rep.checks(q)]
    claims = [row.record() for row in rep.claims(q)]
    fig = rep.plot(q)
    summary = {"name": rep.name, "title": rep.title, "quick": bool(quick), **rep.report(q)}
    summary["checks"] = checks
    summary["claims"] = claims
    if isinstance(summary.get("wall_time_s"), dict):
        summary["wall_time_s"]["total"] = time.perf_counter() - t_start
    return write_outputs(out, rep.name, fig, summary)
