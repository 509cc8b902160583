"""Held-out evaluation data (autograder/grading/heldout.py): a trained model's graded accuracy is worked out on images and
labels the grader draws with a seed of the course's own, which the student's kernel never receives; an accuracy
on inputs and labels the test handed over is a condition that earns nothing by itself."""

from __future__ import annotations

import numpy as np
import pytest

from autograder.grading.heldout import course_seed, draw, heldout_case
from autograder.grading.reference import answer_in_kernel
from dlcourse.grading import Case

SPEC = {"data": "shapes", "like": {"seed": 16, "n_train": 200, "n_val": 200}, "n": 300}


def test_the_course_seed_is_made_once_and_kept(tmp_path):
    from autograder.course import Course

    course = Course(root=tmp_path)
    first = course_seed(course)
    assert course_seed(Course(root=tmp_path)) == first
    assert (tmp_path / ".grading" / "heldout-seed").is_file()
    (tmp_path / ".grading" / "heldout-seed").write_text("00000000000000ff\n")
    assert course_seed(Course(root=tmp_path)) == 255


def test_a_copy_of_the_course_keeps_its_seed(tmp_path):
    """``run``, ``demo``, the benchmarks and the mutation tool grade in a copy of the course: with a seed of its own,
    the copy would draw other held-out data and other measured inputs than the course (another grade for the same
    hand-in), and rebuild the reference its cache shares with the course, under a grader still using it."""
    from autograder.course import Course

    main = Course()
    copy = main.copy(main.assignments()[:1], root=tmp_path / "copy", cache_root=tmp_path / "cache")
    assert course_seed(copy) == course_seed(main)
    assert copy.seed_file() != main.seed_file()  # its own file: a copy never writes into the course


def test_a_draw_depends_on_the_seed_alone_and_is_standardised_as_the_training_images_were():
    from dlcourse.a6 import shapes_splits

    X, y = draw(SPEC, 12345)
    again, labels = draw(SPEC, 12345)
    other, _ = draw(SPEC, 54321)
    assert X.shape == (300, 1, 16, 16) and np.array_equal(X, again) and np.array_equal(y, labels)
    assert not np.allclose(X, other)
    # the same images as shapes_splits gives for that seed's test part, standardised with seed 16's training images
    same_seed, _ = draw({**SPEC, "like": {"seed": 7, "n_train": 200, "n_val": 200}, "n": 1400}, 7)
    test_part = shapes_splits(seed=7, n_train=200, n_val=200)["test"][0].numpy()
    np.testing.assert_allclose(same_seed[400:], test_part, rtol=1e-5, atol=1e-5)
    assert set(np.unique(y)) <= {0, 1, 2, 3}


def test_the_handed_labels_are_replaced_and_a_missing_seed_is_refused():
    case = Case(
        "a.model", "model_accuracy", {"inputs": [[0.0]], "labels": [1], "at_least": 0.5, "heldout": SPEC}
    )
    drawn = heldout_case(case, 99)
    assert len(drawn.params["labels"]) == 300 and drawn.params["labels"] != [1]
    with pytest.raises(RuntimeError, match="no held-out seed"):
        heldout_case(case, None)
    plain = Case("a.model", "model_accuracy", {"inputs": [[0.0]], "labels": [1], "at_least": 0.5})
    assert heldout_case(plain, 99) is plain
    # a model's accuracy on labels the test handed over can take points away, never earn them
    assert answer_in_kernel(plain) and not answer_in_kernel(case)
