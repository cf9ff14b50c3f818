"""What is computed from a run's folder: figures, intervals, verdicts and the report of each
experiment, from the files the records layer (crasplab.records) defines.

    figures      matplotlib figures saved atomically
    intervals    95% intervals of accuracies and of their differences
    length_gen   the from-scratch length-generalization report (experiments/length_gen.py)
    in_context   the in-context evaluation report of pretrained models (experiments/pretrained.py)
    realistic    the lorem-ipsum and git reports (experiments/realistic.py)
    mechanism    head scores and ablations (experiments/mechanism.py)
    finetune     the fine-tuning report, before and after (experiments/finetune.py)
    protocol     the verdict protocol's tables in words (the verdicts themselves: crasplab.verdicts)
    selection    the sweep's choice of a configuration per task (experiments/sweep.py)
    occurrence_cells  accuracy by occurrence count and distance (experiments/occurrence_cells.py)

Reports decide nothing: the verdict rules and their application live in crasplab.verdicts.
Every report is rebuilt from the run folder's files alone, so a number in it can always be traced
to what the run wrote.
"""
