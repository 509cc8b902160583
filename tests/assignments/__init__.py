"""The graded assignments: releases, samples, the wrong-work corpus, lecture pastes, canaries, parts graded apart."""
