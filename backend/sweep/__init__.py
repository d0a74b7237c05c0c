"""Sweeps (issue 30 section 2): one form, up to three of its fields varied over lists of values
(a grid) or N seeds, each point a run through the page's own Start; ranked by a metric the
user picks. spec.py: the spec, its bounds and the runs it makes (pure); record.py: the sweep's
file, <runs>/sweeps/<id>.json; view.py: the ranking (pure); desk.py: plan, create, view,
stop, add runs; cli.py: `python app.py sweep` and `status --sweep`. docs/sweeps.md.
"""
