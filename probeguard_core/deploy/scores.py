"""Step 2 of certifying a deployer's logs, *score* (§3.2, Eq. 7), and the scoring that applying a
certificate shares with it.

Every question gets the score of its stratum (:func:`probeguard_core.scoring.stratum_scores`:
S1 by z(kappa) + z(RSE), S2 by the trajectory-averaged agreement a-bar, S3 none).  At
calibration the z constants of S1 are each dataset's calibration unanimous layer (label-free)
and are frozen into the certificate; :func:`frozen_s1_scores` puts new questions on that scale.
:func:`score` turns a :class:`~probeguard_core.deploy.request.Request` into :class:`Scored`, the
input of step 3 (:func:`probeguard_core.deploy.ltt.run_ltt`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import logs as L
from probeguard_core import scoring
from probeguard_core.deploy.errors import DeployError
from probeguard_core.deploy.request import UNSPECIFIED, Request
from probeguard_core.features import final_answer

__all__ = ["Scored", "base_table", "frozen_s1_scores", "score", "stratum_name", "stratum_sort_key"]

Standardization = Mapping[str, Mapping[str, Mapping[str, float]]]


@dataclass
class Scored:
    """Per-question scores on the calibration scale, the frozen z constants and the notes."""

    request: Request
    table: pd.DataFrame  # stratum_scores + specialty, system_answer, stratum_name
    standardization: dict[str, dict[str, dict[str, float]]]
    notes: list[str]


def base_table(
    logs: Sequence[L.QuestionLog], probe: Iterable[L.ProbeRecord] | None, nli: Iterable[L.NLIRecord] | None
) -> pd.DataFrame:
    """stratum_scores plus specialty and answers; index qid in log order."""
    try:
        df = scoring.stratum_scores(logs, probe, nli)
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    df["specialty"] = pd.Series([log.specialty for log in logs], index=df.index, dtype=object)
    df["system_answer"] = [final_answer(log) for log in logs]
    return df


def stratum_name(base: str, specialty: Any, stratify_by: str | None) -> str:
    """The certificate's stratum of a question: its base stratum, or ``base|specialty`` under
    ``stratify_by="specialty"`` (Appendix I; a null specialty is :data:`UNSPECIFIED`; S3 never split)."""
    if stratify_by is None or base == "S3":
        return base
    if specialty is None or (isinstance(specialty, float) and math.isnan(specialty)):
        return f"{base}|{UNSPECIFIED}"
    return f"{base}|{specialty}"


def stratum_sort_key(name: str) -> tuple[str, int, str]:
    """The certificate's order of strata: by base stratum, then specialty, ``unspecified`` last."""
    base, _, spec = name.partition("|")
    return (base, 1 if spec == UNSPECIFIED else 0, spec)


def frozen_s1_scores(df: pd.DataFrame, standardization: Standardization) -> pd.Series:
    """S1 scores on the calibration scale: unanimous_layer_score_frozen per dataset."""
    out = pd.Series(np.nan, index=df.index, dtype=float)
    s1 = df[df["stratum"] == "S1"]
    for ds, part in s1.groupby("dataset", sort=True):
        consts = standardization.get(ds)
        if consts is None:
            continue
        out.loc[part.index] = scoring.unanimous_layer_score_frozen(
            part["kappa"].to_numpy(), part["rse"].to_numpy(), consts
        )
    return out


def score(req: Request) -> Scored:
    """Stratum scores (§3.2, Eq. 7), S1 on frozen per-dataset z constants; coverage checks."""
    df = base_table(req.logs, req.probe, req.nli)
    n_s1 = int((df["stratum"] == "S1").sum())
    have_probe, have_nli = req.probe is not None, req.nli is not None
    notes: list[str] = []
    if n_s1:
        if have_probe != have_nli:
            given, missing = ("probe", "NLI") if have_probe else ("NLI", "probe")
            raise DeployError(
                f"the S1 score z(kappa) + z(RSE) needs both probe and NLI records; only {given} records "
                f"were given (pass --{missing.lower()} too, or neither to let S1 abstain as a whole)"
            )
        if have_probe:
            s1 = df[df["stratum"] == "S1"]
            for col, what in (("kappa", "counter_evidence probe record"), ("rse", "round-1 NLI record")):
                miss = s1.index[s1[col].isna()].tolist()
                if miss:
                    raise DeployError(
                        f"{len(miss)} of {n_s1} S1 (unanimous) calibration questions have no {what}, "
                        f"e.g. qid {miss[0]!r}; the certificate would silently drop them. "
                        "Provide complete probe/NLI files for the calibration logs"
                    )
        else:
            notes.append(
                f"No probe and NLI records were given: the {n_s1} S1 (unanimous-layer) questions have no "
                "score and S1 abstains as a whole (refers every unanimous question)."
            )
    for base in ("S1", "S2"):
        if not (df["stratum"] == base).any():
            msg = (f"stratum {base} has no calibration questions: Algorithm 2 cannot certify it and every "
                   f"{base} question would be referred")
            if not req.allow_empty_strata:
                raise DeployError(msg + "; add calibration data, or pass --allow-empty-strata to let it abstain")
            notes.append(msg + " (allowed by --allow-empty-strata).")
    # standardization constants: each dataset's calibration unanimous layer (label-free)
    standardization: dict[str, dict[str, dict[str, float]]] = {}
    if have_probe and have_nli:
        for ds, part in df[df["stratum"] == "S1"].groupby("dataset", sort=True):
            standardization[str(ds)] = {
                "kappa": scoring.zscore_constants(part["kappa"].to_numpy()),
                "rse": scoring.zscore_constants(part["rse"].to_numpy()),
            }
    s1_mask = df["stratum"] == "S1"
    got = frozen_s1_scores(df, standardization)[s1_mask].to_numpy()
    if not np.array_equal(df.loc[s1_mask, "score"].to_numpy(), got, equal_nan=True):  # same arithmetic, two paths
        raise AssertionError("frozen S1 standardization disagrees with scoring.stratum_scores")
    df.loc[s1_mask, "score"] = got
    df["stratum_name"] = [stratum_name(b, s, req.stratify_by) for b, s in zip(df["stratum"], df["specialty"])]
    return Scored(req, df, standardization, notes)
