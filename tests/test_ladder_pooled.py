"""ladder.check's pooled judgement of few-element outputs (RATIO_MIN_ELEMENTS /
RATIO_POOL_SEEDS): a toy family whose candidate and baseline errors are set per seed."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from ladder import board, check, contract, recschema
from ladder.paths import BadFamily


@dataclass(frozen=True)
class Shape:
    name: str


def toy(cand: dict[int, tuple[float, float]], base: dict[int, tuple[float, float]], **extra):
    """Outputs "many" (64 values) and "few" (2 values); an implementation's relative error
    per output and seed is given by ``cand`` / ``base``: {seed: (many_err, few_err)}."""

    def impl(errs):
        def out(inputs):
            seed = int(inputs[0])
            e_many, e_few = errs.get(seed, (0.01, 0.01))
            return torch.ones(64) * (1 + e_many), torch.ones(2) * (1 + e_few)

        return out

    return toy_family(lambda s: (torch.ones(64), torch.ones(2)), impl(base), **extra), impl(cand)


def toy_family(reference, baseline, **extra) -> SimpleNamespace:
    """The toy family: its seed is its one input; ``reference(seed)`` gives the oracle's
    (many, few) and ``baseline`` plays fla."""
    return SimpleNamespace(
        FAMILY="toy",
        TOLERANCES={"many": 0.1, "few": 0.1},
        ERR_RATIO_MAX=1.25,
        make_inputs=lambda shape, dev, seed: (torch.tensor(seed),),
        reference=reference,
        run=lambda impl_, inputs, poison: impl_(inputs),
        BASELINE=baseline,
        **extra,
    )


POOL = {"RATIO_MIN_ELEMENTS": 16, "RATIO_POOL_SEEDS": 4}


def test_a_few_element_output_is_judged_pooled() -> None:
    # seed 0: few 2x worse than fla; seeds 1-3: better: pooled ratio below 1.25
    cand = {0: (0.01, 0.02), 1: (0.01, 0.005), 2: (0.01, 0.005), 3: (0.01, 0.005)}
    base = {s: (0.01, 0.01) for s in range(4)}
    fam, idea = toy(cand, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert res.err_ratio["few"] == pytest.approx(2.0)
    assert res.passed, res
    p = res.pooled["few"]
    assert p["seeds"] == 4 and set(res.pooled) == {"few"}
    # every seed's reference has the same norm here, so the stacked relative error is the
    # root mean square of the per-seed ones
    assert p["candidate_err"] == pytest.approx(math.sqrt((0.02**2 + 3 * 0.005**2) / 4))
    assert p["baseline_err"] == pytest.approx(0.01)
    assert p["worst_candidate_err"] == pytest.approx(0.02)
    assert p["pooling"] == "stacked"
    # the record keeps the single-seed numbers and adds the pooled ones; schema and board
    entry = res.record_entry()
    assert entry["err_ratio"]["few"] == pytest.approx(2.0) and "pooled" in entry
    rec = {"shapes": [{"correctness": json.loads(json.dumps(entry))}]}
    assert board._worst_err_ratio(rec) == pytest.approx(p["err_ratio"])
    v = recschema._V({"record_id": "x"})
    assert v.correctness({"correctness": entry}, "shapes[0].correctness") is True


def test_pool_seeds_widens_the_pool_and_keeps_each_seed() -> None:
    # worse than fla at seeds 0-3, better at 4-7: the family's 4 seeds fail, 8 seeds pass
    cand = {s: (0.01, 0.014 if s < 4 else 0.006) for s in range(8)}
    base = {s: (0.01, 0.01) for s in range(8)}
    fam, idea = toy(cand, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and res.pooled["few"]["seeds"] == 4
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True, pool_seeds=8)
    p = res.pooled["few"]
    assert res.passed and p["seeds"] == 8
    assert p["err_ratio"] == pytest.approx(
        math.sqrt((4 * 0.014**2 + 4 * 0.006**2) / 8e-4), rel=1e-4
    )
    assert [c for c, _ in res.per_seed["few"]] == pytest.approx(
        [cand[s][1] for s in range(8)], rel=1e-4
    )
    assert "per_seed" not in res.record_entry()  # printed, never recorded


def test_a_few_element_output_worse_at_every_seed_fails_pooled() -> None:
    cand = {s: (0.01, 0.02) for s in range(4)}
    base = {s: (0.01, 0.01) for s in range(4)}
    fam, idea = toy(cand, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and res.pooled["few"]["err_ratio"] == pytest.approx(2.0)


def test_every_pooled_seed_must_meet_the_tolerance() -> None:
    # pooled ratio fine, but seed 2's error is past the absolute tolerance (0.1) where fla's
    # own error is within it
    cand = {0: (0.01, 0.02), 1: (0.01, 0.001), 2: (0.01, 0.11), 3: (0.01, 0.001)}
    base = {0: (0.01, 0.01), 1: (0.01, 0.01), 2: (0.01, 0.09), 3: (0.01, 0.01)}
    fam, idea = toy(cand, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert res.pooled["few"]["err_ratio"] < 1.25 and not res.passed
    assert set(res.failed) == {"few"} and "at seed 2 is past the tolerance" in res.failed["few"]


def test_a_seed_where_fla_itself_is_past_the_tolerance_judges_against_fla_there() -> None:
    # seed 2's reference nearly cancels: fla's own error is 0.2, twice the tolerance (0.1)
    base = {0: (0.01, 0.01), 1: (0.01, 0.01), 2: (0.01, 0.2), 3: (0.01, 0.01)}
    better = {0: (0.01, 0.01), 1: (0.01, 0.01), 2: (0.01, 0.15), 3: (0.01, 0.01)}
    fam, idea = toy(better, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert res.passed and not res.failed, res.failed
    # past 1.25x fla's error at that seed: fails, though the pooled ratio alone would pass
    worse = {0: (0.01, 0.01), 1: (0.01, 0.01), 2: (0.01, 0.26), 3: (0.01, 0.01)}
    noisy = {0: (0.01, 0.09), 1: (0.01, 0.09), 2: (0.01, 0.2), 3: (0.01, 0.09)}
    fam, idea = toy(worse, noisy, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert res.pooled["few"]["err_ratio"] < 1.25 and not res.passed
    assert "1.30x fla's 2.000e-01 there" in res.failed["few"]
    # a non-finite error at such a seed fails too
    nan = {**better, 2: (0.01, math.nan)}
    fam, idea = toy(nan, base, **POOL)
    assert not check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True).passed


def test_failed_names_each_failing_output_and_why() -> None:
    cand = {0: (0.5, 0.01)}  # "many" past its tolerance at the shape's seed
    fam, idea = toy(cand, {}, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and set(res.failed) == {"many"}
    assert "past the tolerance" in res.failed["many"]
    ratio = {0: (0.02, 0.01)}  # "many" 2x fla's (0.01), within the tolerance
    fam, idea = toy(ratio, {}, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert res.failed == {"many": "error 2.000x fla's, past 1.25x"}
    nan_fla = {0: (math.nan, 0.01)}  # fla's own "many" is not finite: nothing to hold ours to
    fam, idea = toy({}, nan_fla, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and res.failed == {
        "many": "fla's own error is not finite here: no ratio to judge by"
    }
    zero_fla = {0: (0.0, 0.01)}  # fla exact, ours not: failed, without dividing by zero
    fam, idea = toy({}, zero_fla, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert res.failed == {"many": "error 1.000e-02 where fla's is 0"}


def test_a_shape_wide_problem_skips_pooling_and_blames_no_few_element_ratio() -> None:
    # a contract problem fails the shape; the few-element output's one-seed ratio (2x here)
    # is not reported as a reason, since one seed's ratio says little
    cand = {0: (0.01, 0.02)}
    fam, idea = toy(cand, {}, **POOL, contract_problems=lambda outs, inputs: ["bad layout"])
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and res.problems == ["bad layout"]
    assert res.pooled is None and res.failed == {}


def test_a_lucky_seed_gets_no_second_chance() -> None:
    # fine at the shape's seed, 3x worse than fla at every other: pooled always, so it fails
    cand = {0: (0.01, 0.008), 1: (0.01, 0.03), 2: (0.01, 0.03), 3: (0.01, 0.03)}
    base = {s: (0.01, 0.01) for s in range(4)}
    fam, idea = toy(cand, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert res.err_ratio["few"] == pytest.approx(0.8, rel=1e-4)
    assert not res.passed and res.pooled["few"]["err_ratio"] > 2


def test_a_non_finite_output_at_any_pooled_seed_fails() -> None:
    cand = {0: (0.01, 0.01), 1: (0.01, 0.01), 2: (0.01, math.nan), 3: (0.01, 0.01)}
    base = {s: (0.01, 0.01) for s in range(4)}
    fam, idea = toy(cand, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and math.isnan(res.pooled["few"]["candidate_err"])
    entry = res.record_entry()  # non-finite numbers are stored as null
    assert entry["pooled"]["few"]["candidate_err"] is None


def test_many_element_outputs_and_families_without_pooling_judge_one_seed() -> None:
    cand = {0: (0.02, 0.01)}
    base = {0: (0.01, 0.01)}
    fam, idea = toy(cand, base, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and set(res.pooled) == {"few"}  # "many" has 64 values: one seed
    fam, idea = toy({0: (0.01, 0.02)}, {0: (0.01, 0.01)})  # no RATIO_* in the family
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=True)
    assert not res.passed and res.pooled is None
    assert "pooled" not in res.record_entry()
    # without the baseline (CPU interpreter) only the tolerances apply: nothing to pool
    fam, idea = toy({0: (0.01, 0.02)}, {}, **POOL)
    res = check.check_shape(fam, idea, Shape("s"), "cpu", 0, baseline=False)
    assert res.passed and res.pooled is None


def test_the_pool_settings_come_together_and_are_ints() -> None:
    import ladder.kernels.kda.family as kda

    assert contract._problem(kda, "RATIO_MIN_ELEMENTS") is None
    for bad, what in (
        ({"RATIO_MIN_ELEMENTS": 16}, "set together with RATIO_POOL_SEEDS"),
        ({**POOL, "RATIO_POOL_SEEDS": 1}, "an int >= 2"),
        ({**POOL, "RATIO_MIN_ELEMENTS": 2.5}, "an int >= 2"),
    ):
        mod = SimpleNamespace(**bad)
        probs = [contract._problem(mod, n) for n in bad]
        assert any(p and what in p for p in probs), (bad, probs)
    with pytest.raises(BadFamily, match="RATIO_MIN_ELEMENTS: must be set together"):
        fake = SimpleNamespace(FAMILY="toy", ENTRY_POINTS=("f",), TARGET_DEVICE="H200",
                               RATIO_MIN_ELEMENTS=16)  # fmt: skip
        contract.validate_family(fake, "toy/family.py", "toy", complete=False)


def test_a_seed_whose_reference_nearly_cancels_does_not_stand_in_for_the_pool() -> None:
    # "few"'s reference is 10x smaller at seed 0 (a sum that nearly cancels), so both
    # implementations' relative errors are 10x larger there at the same absolute error.
    # Absolute errors per element: the candidate 1.5e-3 at seed 0 and 1e-3 elsewhere, fla
    # 1e-3 everywhere. Pooled as relative errors, seed 0 would make up nearly all of the
    # pool (ratio 1.49, a failure on one seed's two values); taken together the seeds give
    # sqrt((1.5^2 + 3) / 4) = 1.15, and the candidate passes.
    scale = {0: 0.1}

    def impl(abs_err):
        def out(inputs):
            seed = int(inputs[0])
            ref = scale.get(seed, 1.0)
            return torch.ones(64), torch.full((2,), ref + abs_err.get(seed, 1e-3))

        return out

    fam = toy_family(
        lambda s: (torch.ones(64), torch.full((2,), scale.get(int(s), 1.0))), impl({}), **POOL
    )
    res = check.check_shape(fam, impl({0: 1.5e-3}), Shape("s"), "cpu", 0, baseline=True)
    p = res.pooled["few"]
    assert res.err_ratio["few"] == pytest.approx(1.5, rel=1e-4)
    old_way = math.sqrt(0.015**2 + 3e-6) / math.sqrt(0.01**2 + 3e-6)
    assert old_way > fam.ERR_RATIO_MAX
    assert p["err_ratio"] == pytest.approx(math.sqrt((1.5**2 + 3) / 4), rel=1e-4)
    assert p["candidate_err"] == pytest.approx(
        math.sqrt((2 * 1.5e-3**2 + 6 * 1e-3**2) / (2 * 0.01 + 6)), rel=1e-4
    )
    assert res.passed, res
    # the same absolute error, 2x fla's, at every seed still fails
    worse = {s: 2e-3 for s in range(4)}
    bad = check.check_shape(fam, impl(worse), Shape("s"), "cpu", 0, baseline=True)
    assert not bad.passed and bad.pooled["few"]["err_ratio"] == pytest.approx(2.0, rel=1e-4)
    assert "pooled error" in bad.failed["few"]


def test_stacked_error_is_the_relative_error_of_the_seeds_taken_together() -> None:
    """stacked_error (also the package's GPU tests' pooling) against the concatenation it
    stands for, in float64."""
    gen = torch.Generator().manual_seed(7)
    refs = [
        torch.randn(n, generator=gen, dtype=torch.float64) * s
        for n, s in ((3, 10.0), (5, 0.01), (2, 1.0))
    ]
    outs = [r + 0.1 * torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in refs]
    rel = [float((o - r).norm() / r.norm()) for o, r in zip(outs, refs)]
    norms = [float(r.norm()) for r in refs]
    want = float((torch.cat(outs) - torch.cat(refs)).norm() / torch.cat(refs).norm())
    assert check.stacked_error(rel, norms) == pytest.approx(want, rel=1e-12)
    # a zero reference contributes its absolute error (rel_err's convention), to no norm
    assert check.stacked_error([0.5, 0.2], [0.0, 2.0]) == pytest.approx(
        ((0.5**2 + 0.4**2) / 4) ** 0.5
    )
