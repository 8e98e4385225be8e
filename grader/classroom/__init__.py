"""The class wing: a whole class graded into one gradebook, and every view of it.

``gradebook`` owns every grade (the one SQLite database of a class);
``batch`` finds and grades the submissions into it; ``late``, ``rubric``
and ``similarity`` are the policy, the staff's sheet and the similar pairs;
``views``, ``pages`` and ``lms`` write what people read (CSV files, the
class's HTML report, Canvas's import); ``run`` is what each class command
does.  The engine (grading one submission) never imports from here.
"""
