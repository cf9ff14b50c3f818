"""The verdict layer: the rules by which trained models are read, and the planning of protocol
rounds that follows from them. It sits above the records it reads (crasplab.records) and the
training settings it plans for (crasplab.train), and below the run that uses it (crasplab.cli)
and the reports that render what it decides (crasplab.reports).

    rules        the rules (fit, pass, task verdict, the threshold, seeds per encoding), their
                 file protocol.json, and verdicts as an Enum
    predictions  what the interpreter predicts for a run's tasks, with the discrimination check,
                 written once to predictions.json when the run starts
    counting     the per-seed verdict table of a run, controls applied, and the next protocol
                 round's seeds
"""
