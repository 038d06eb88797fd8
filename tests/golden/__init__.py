"""The golden vectors and their loader (:mod:`tests.golden.loader`)."""
