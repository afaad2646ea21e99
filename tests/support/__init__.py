"""Helpers shared by several test folders (imported as ``support.<module>``; the root
``tests/conftest.py`` puts ``tests/`` on ``sys.path``).

* ``exact``: exact stationary laws of SGMCMC recursions (the one home of that machinery);
* ``gradients``: float64 problems with closed-form gradients;
* ``runs``: problems for the run-loop tests;
* ``nets``: network builders for the partition / structured tests;
* ``paths``: the repository root and the shared reference-data folder.
"""
