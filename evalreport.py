"""evalreport.py — an eval's numbers, from its record: what `agentgod eval` prints, `eval show`
shows again, and `eval compare` sets side by side. No model calls, no writes.

Per arm, over the cases every arm has a score for (so the arms are compared on the same cases):
the mean score with its 95 % bootstrap interval, the paired difference to the single call with
its interval (significant when it excludes 0), dollars, calls and seconds per case, dollars as a
multiple of the single call's (what equal dollars would buy), score per dollar, and the results
that fell short, by kind. The resampling is seeded by the eval's id, so showing an eval again
shows the same intervals.
"""

from __future__ import annotations

from collections import Counter

from agentgod import evalstats
from agentgod.evalrecord import EvalRow, ResultRow
from agentgod.replies import (
    EvalArm,
    EvalArmChange,
    EvalCase,
    EvalChange,
    EvalComparison,
    EvalReport,
    Interval,
)

BASELINE = "single"


def interval(estimate: evalstats.Estimate) -> Interval:
    return Interval(
        mean=round(estimate.mean, 6),
        low=round(estimate.low, 6),
        high=round(estimate.high, 6),
        n=estimate.n,
        significant=estimate.significant,
    )


def complete_cases(record: EvalRow) -> list[int]:
    """The cases (by seq) that every arm has a score for."""
    scored: dict[int, set[str]] = {}
    for result in record.results:
        if result.score is not None:
            scored.setdefault(result.seq, set()).add(result.arm)
    arms = set(record.arms)
    return [case.seq for case in record.cases if scored.get(case.seq, set()) >= arms]


def _failure(result: ResultRow) -> str | None:
    if not result.status.finished:
        return result.status.value if result.status.value != "pending" else None
    if result.score is not None and result.score >= 1:
        return None  # passed, even without an answer (a budget kept to)
    if result.error_kind:
        return result.error_kind
    if result.score is None:
        return "unscored" if result.detail else None
    return "wrong" if result.score == 0 else None


def report(record: EvalRow) -> EvalReport:
    """The eval's figures as they stand (a running eval's too)."""
    complete = complete_cases(record)
    results = {(r.seq, r.arm): r for r in record.results}
    base = [results[seq, BASELINE] for seq in complete] if BASELINE in record.arms else []
    base_usd = evalstats.mean([r.usd for r in base])
    arms: list[EvalArm] = []
    for arm in record.arms:
        mine = [results[seq, arm] for seq in complete]
        scores = [float(r.score or 0.0) for r in mine]
        seed = f"{record.eval_id}:{arm}"
        vs_single = None
        if arm != BASELINE and base:
            baseline_scores = [float(r.score or 0.0) for r in base]
            vs_single = interval(evalstats.paired(scores, baseline_scores, seed=seed + ":paired"))
        usd = evalstats.mean([r.usd + r.judge_usd for r in mine])
        score = evalstats.bootstrap(scores, seed=seed)
        every = [r for r in record.results if r.arm == arm]
        arms.append(
            EvalArm(
                arm=arm,
                cases=len(mine),
                score=interval(score),
                vs_single=vs_single,
                usd_per_case=round(usd, 6),
                usd_ratio=round(usd / base_usd, 3) if base_usd > 0 and base else None,
                calls_per_case=round(evalstats.mean([r.calls + r.judge_calls for r in mine]), 3),
                seconds_per_case=round(evalstats.mean([r.seconds for r in mine]), 3),
                score_per_usd=_rounded(evalstats.per_dollar(score.mean, usd)),
                failures=dict(Counter(k for r in every if (k := _failure(r)) is not None)),
                usd=round(sum(r.usd + r.judge_usd for r in every), 6),
            )
        )
    per_case: list[EvalCase] = []
    for case in record.cases:
        mine = [r for r in record.results if r.seq == case.seq]
        per_case.append(
            EvalCase(
                id=case.case_id,
                task=case.task,
                scores={r.arm: r.score for r in mine},
                usd={r.arm: round(r.usd + r.judge_usd, 6) for r in mine},
                runs={r.arm: r.run_id for r in mine},
                status={r.arm: r.status.value for r in mine},
                details={r.arm: r.detail or r.error for r in mine},
            )
        )
    return EvalReport(
        eval_id=record.eval_id,
        suite=record.suite,
        status=record.status.value,
        model=str(record.options.get("model", "")),
        effort=str(record.options.get("effort", "")),
        arms=arms,
        cases=len(record.cases),
        complete=len(complete),
        usd=round(record.usd, 6),
        judge_usd=round(sum(r.judge_usd for r in record.results), 6),
        calls=sum(r.calls + r.judge_calls for r in record.results),
        seconds=round(record.seconds, 3),
        batch_id=record.batch_id,
        per_case=per_case,
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def compare(before: EvalRow, after: EvalRow) -> EvalComparison:
    """What changed from `before` to `after`: per arm both ran, the paired difference (after
    minus before) over the cases both scored, matched by case id; a case whose task changed is
    left out, since its scores measure different things."""
    old_cases = {case.case_id: case for case in before.cases}
    new_cases = {case.case_id: case for case in after.cases}
    left_out: list[str] = []
    matched: list[tuple[int, int, str]] = []
    for case_id, case in new_cases.items():
        old = old_cases.get(case_id)
        if old is None:
            left_out.append(f"{case_id}: only in {after.eval_id}")
        elif old.task != case.task or old.expect != case.expect:
            left_out.append(f"{case_id}: its task or its checks changed")
        else:
            matched.append((old.seq, case.seq, case_id))
    left_out += [f"{c}: only in {before.eval_id}" for c in old_cases if c not in new_cases]
    old_results = {(r.seq, r.arm): r for r in before.results}
    new_results = {(r.seq, r.arm): r for r in after.results}
    arms: list[EvalArmChange] = []
    changes: list[EvalChange] = []
    for arm in [arm for arm in after.arms if arm in before.arms]:
        earlier: list[float] = []
        later: list[float] = []
        for old_seq, new_seq, case_id in matched:
            old_result = old_results.get((old_seq, arm))
            new_result = new_results.get((new_seq, arm))
            if old_result is None or new_result is None:
                continue
            if old_result.score is None or new_result.score is None:
                continue
            earlier.append(old_result.score)
            later.append(new_result.score)
            if old_result.score != new_result.score:
                changes.append(
                    EvalChange(id=case_id, arm=arm, before=old_result.score, after=new_result.score)
                )
        seed = f"{before.eval_id}:{after.eval_id}:{arm}"
        arms.append(
            EvalArmChange(
                arm=arm,
                cases=len(later),
                before=round(evalstats.mean(earlier), 6),
                after=round(evalstats.mean(later), 6),
                difference=interval(evalstats.paired(later, earlier, seed=seed)),
            )
        )
    return EvalComparison(
        before=before.eval_id, after=after.eval_id, arms=arms, changes=changes, left_out=left_out
    )
