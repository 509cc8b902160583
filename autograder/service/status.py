"""The instructor's view of the service, for the API's ``/api/status`` and the live page: the queue, time to
feedback, errors, and each student's latest submission."""

from __future__ import annotations

import statistics

from autograder.service.store import Store, parse_stamp


def status_of(store: Store, doors: dict) -> dict:
    """The instructor's view of the service: the queue, time to feedback, errors, each student's latest."""
    listed = store.listed(limit=100000)
    waits = sorted(
        (parse_stamp(s.finished_utc) - parse_stamp(s.received_utc)).total_seconds()
        for s in listed
        if s.state == "graded" and s.finished_utc
    )
    latest: dict[str, dict] = {}
    for s in listed:  # newest first: the first seen is the latest
        latest.setdefault(f"{s.student_id}/{s.aid}", {
            "student": s.student_id, "assignment": s.aid, "state": s.state, "score": s.score,
            "received": s.received_utc, "feedback_page": f"/api/submissions/{s.id}/feedback",
        })  # fmt: skip
    for s in listed:  # the one the gradebook holds (service.toml's counts), after its late penalty
        if s.counted and f"{s.student_id}/{s.aid}" in latest:
            latest[f"{s.student_id}/{s.aid}"]["counted"] = {"id": s.id, "final": s.final}
    return {
        "counts": store.counts(),
        "seconds_to_feedback": {
            "p50": statistics.median(waits) if waits else None,
            "p95": waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else None,
            "max": waits[-1] if waits else None,
        },
        "errors": [{"id": s.id, "student": s.student_id, "reason": s.reason} for s in listed if s.state == "error"],
        "latest": list(latest.values()),
        "assignments": {aid: {"state": d.state, "reason": d.reason} for aid, d in doors.items()},
    }  # fmt: skip
