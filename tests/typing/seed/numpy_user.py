"""Imports the stub pytype could not load in the upstream change."""

import seedjax.numpy

seedjax.numpy.from_dlpack(1.0, copy=True)
