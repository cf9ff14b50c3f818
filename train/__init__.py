"""Training from scratch on the task library: online batches, AdamW, evaluation per length bin.

    from crasplab.train.config import PRESETS                    # presets "quick" (2-core CPU) and "paper"
    from crasplab.train.loop import Job, run_job, run_stack      # one (task, seed) per folder; resumable
    quick = PRESETS["quick"]
    job = Job(task_code="UF", seed=0, model=quick.model.replace(pe="rope"), train=quick.train,
              task_overrides={"alphabet_size": 64}, out_dir="runs/x/UF/seed0")
    result = run_job(job)        # JobResult: .bins (BinEval: lo, hi, accuracy, n, ...), .steps, .stopped_early

Modules: config (model and training settings, presets), data (batches from (seed, step)), steps (the compiled
training and evaluation steps, vmapped over a stack of models, batch sharded over devices),
evaluate (accuracy per bin + greedy cross-check), checkpoint (atomic files), loop (a resumable
run), trained (a trained model back from its folder), workers (one pinned process per
CPU core, or stacked seeds on an accelerator; progress bars).
"""
