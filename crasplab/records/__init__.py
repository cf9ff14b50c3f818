"""The records every layer above reads and writes: files written atomically, a job's folder and
its formats, a run's folder (config.json written once, its lock), and the base of the
experiments' settings types. Training writes them (crasplab.train), the reports read them
(crasplab.reports); nothing here imports either.

    files        atomic JSON / JSON-lines / text writes, tolerant JSON-lines reading (plain or compressed),
                 clear file errors
    archives     archives read back member by member: regular files and folders inside the target, capped
    job_folder   a job's folder: job.json, metrics.jsonl, result.json, the checkpoint; its records as reports read them
    run_folder   config.json: written once, a changed command refused, read back as the run's settings; the
                 folder's lock (one process per run folder)
    answers      results.jsonl of the experiments that answer prompts: one typed record per answer
    settings     the base of the experiments' settings types: every field checked against its type on construction
"""
