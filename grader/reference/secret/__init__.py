"""The secret references: everything in this folder stays with the instructors.

A module placed here is secret as a whole, because of where it is: the student
edition leaves the folder out (``grader.release``) and puts a replay module in
its place for each module (``grader.replay``), and a worker may not read it
(``grader.sandbox.confine``).  Nothing lists these modules by name.
"""
