"""Data the tests read: submissions written outside the reference (``independent/``) and
the mutant corpora (``mutants/``, one realistic mistake each)."""
