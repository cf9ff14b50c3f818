"""A run's folder and what is computed from it: atomic files, the settings check, figures, intervals
and the report of each experiment.

    files        atomic JSON / JSON-lines / text writes, tolerant JSON-lines reading
    run_folder   config.json: written once, a changed command refused, read back with a clear error; the
                 folder's lock (one process per run folder)
    settings     the base of the experiments' settings types: every field checked against its type on construction
    figures      matplotlib figures saved atomically
    intervals    95% intervals of accuracies and of their differences
    length_gen   the from-scratch length-generalization report (experiments/length_gen.py)
    in_context   the in-context evaluation report of pretrained models (experiments/pretrained.py)
    realistic    the lorem-ipsum and git reports (experiments/realistic.py)
    mechanism    head scores and ablations (experiments/mechanism.py)

Every report is rebuilt from the run folder's files alone, so a number in it can always be traced
to what the run wrote.
"""
