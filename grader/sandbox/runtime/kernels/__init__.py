"""Reference kernels, run by a trusted worker only (instructors' code).

A student's worker never sees this folder (an empty, read-only tmpfs over it
under namespaces; left out of the copy of the runtime without them, and
readable by root alone there), and the student edition does not ship it:
the reference kernel is a working answer to ex07.
"""
