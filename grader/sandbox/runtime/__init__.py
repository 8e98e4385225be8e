"""The worker runtime: everything that runs inside a worker, in one folder.

``worker.py`` (the loop that imports and runs student code), ``fork_server_loop.py``
(one process per grading that imports the libraries once and forks the
workers), ``codec.py``
(the wire format), ``measure.py`` (the measurement kit), ``probes/`` (the
trusted functions a suite runs beside the student's module) and
``kernels/`` (the reference kernels a trusted worker times: instructors
only, never seen by a student's worker).

The folder is used as it is: the grader imports it as
``grader.sandbox.runtime``, and a worker imports the same files as the
package ``runtime`` (its folder's name), loaded by ``worker.py`` from where
it lies.  So its modules import one another relatively (``from .. import
measure``) and nothing of the ``grader`` package (``tests/test_runtime.py``
checks both).  Under namespaces the folder is bound read-only into the
sandbox at ``/sandbox/runtime`` (``grader.sandbox.bwrap``); without them it
is copied whole into the worker's private folder
(``grader.sandbox.client.Worker``).
"""
