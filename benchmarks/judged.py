"""What a mutation run's survivors were judged to be, and the scores worked out from them: read by the
mutation harness (:mod:`benchmarks.mutants`) and by the report, so neither imports the other."""

from __future__ import annotations

TARGET = 0.90


# Survivors shown equivalent by an argument (fingerprint of the mutated cell -> the argument), added
# after reading them, and survivors in an open-ended answer (a model or training recipe of the student's
# choice) that still meet its specification, so are no fault ("allowed by the specification"). A
# fingerprint covers the exact mutated code, so an edited solution drops the claim.
JUDGED_EQUIVALENT: dict[str, str] = {
    "9094883547183f31": "A8 wsd_schedule, `step >= total` -> `step > total`: at step == total the decay branch "
    "gives max_lr + (min_lr - max_lr) * decay_steps / decay_steps, which is min_lr up to one rounding (the tests "
    "compare at rtol 1e-9), the value the solution returns there; every other step takes the same branch as before",
    "b122264cbbf8aef8": "A6 make_optimizer, `step >= total_steps` -> `step > total_steps`: at step == total_steps the "
    "cosine branch gives 0.5 * (1 + cos(pi)) = 0.0 exactly (math.cos(math.pi) is -1.0), the value the solution "
    "returns there, and every other step takes the same branch as before",
    "b2e599ae61ee182a": "A6 dihedral_augment, `torch.rand(n) < 0.5` -> `<= 0.5`: differs only for a float32 draw of "
    "exactly 0.5 (probability 2**-24 per image); in the run every captured value but the CPU times was "
    "bit-identical to the control's",
    "1f7111ae508978fc": "allowed by the specification, not a fault: make_cnn may be any CNN with a Conv2d and at "
    "most 2,500 parameters that trains to the accuracy; padding=0 in the second conv is such a CNN",
    "43427660921f4059": "allowed by the specification, not a fault: train_cnn's recipe is the student's choice "
    "(graded by CPU time and test accuracy); overlapping batches one image longer are such a recipe",
    "91a2f82ba5f89d3b": "A6 dihedral_augment, `turns + 4 * mirror` -> `turns - 4 * mirror`: `versions` always "
    "holds exactly 8 entries (2 views x 4 turns), so a mirrored image's index turns - 4 in -4..-1 wraps to "
    "turns + 4, the same entry (checked: identical images on every input the tests use)",
    "2469519eeb85f683": "allowed by the specification, not a fault: make_cnn may be any CNN with a Conv2d and at "
    "most 10,000 parameters that trains to the accuracy; padding=0 in the second conv is such a CNN",
    "a97c39e1ad040ff4": "allowed by the specification, not a fault: train_cnn's recipe is the student's choice "
    "(graded by CPU time and test accuracy); overlapping batches of 51 are such a recipe",
    "83625de073357b01": "A3 matmul_flops, the timed `matmul(a, b)` -> `matmul(b, a)`: the same argument as for "
    "the warm-up (both n x n, every product thrown away, the same events under the recording fake)",
    "b7b55a383f63ea70": "A5 self_cpu_times, the header slice `[a:b]` -> `[a - 1:b]`: torch's key-averages table "
    "puts two spaces between columns, so the extra character is a space that strip() removes; for the first "
    "column `[-1:b]` gives '' instead of 'Name', and the headers are only searched for 'Self CPU', which is "
    "never the first column (checked: self_cpu_times and dominant_self_cpu return the same on every table the "
    "tests use, the shuffled and rescaled ones included)",
    "7a87a84aa910fe96": "A3 matmul_flops, the warm-up `matmul(a, b)` -> `matmul(b, a)`: a and b are both n x n and "
    "the warm-up's product is thrown away, so the call has the same shapes, cost and effect, and the result "
    "depends only on n, repeat and the clock (the tests' recording fake sees the very same events)",
}


def score(rows: list[dict]) -> dict:
    """Killed / (killed + survived), raw and with the survivors shown equivalent left out."""
    killed = sum(r["outcome"] == "killed" for r in rows)
    survived = [r for r in rows if r["outcome"] == "survived"]
    equivalent = sum(bool(r.get("equivalent")) for r in survived)
    decided = killed + len(survived)
    raw = killed / decided if decided else None
    excl = killed / (decided - equivalent) if decided - equivalent else None
    return {
        "mutants": len(rows),
        "killed": killed,
        "survived": len(survived),
        "equivalent": equivalent,
        "errors": sum(r["outcome"] == "error" for r in rows),
        "score_raw": None if raw is None else round(raw, 4),
        "score_excluding_equivalent": None if excl is None else round(excl, 4),
        "target": TARGET,
        "target_met": excl is not None and excl >= TARGET,
    }


def rescore(entry: dict) -> dict:
    """A recorded assignment entry with the survivors that :data:`JUDGED_EQUIVALENT` now covers marked
    equivalent and its scores worked out again (the judgements are made after a run, by reading it)."""
    rows = [
        {**r, "equivalent": r.get("equivalent") or JUDGED_EQUIVALENT.get(r.get("fingerprint", ""), "")}
        if r["outcome"] == "survived"
        else r
        for r in entry["rows"]
    ]
    out = {**entry, **score(rows), "rows": rows}
    if not entry["control"]["full_marks"]:
        out["target_met"] = False
    return out
