"""Trusted helpers that run inside the worker, next to the student's code.

A suite names one as ``Func("probe:<module>.<function>")`` (a callable to pass
to a student function) or runs it with ``student.probe("<module>.<function>",
...)``, which calls ``function(student_module, ...)`` in the worker.  Probes
measure or trace what the student's code does; their answers are data and
are checked in the grading process.  One module per exercise
(``probes/ex04_quadratic.py``, ...) plus ``common.py``.
"""
