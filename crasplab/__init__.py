"""The lab around the interpreter: everything that needs JAX, model files or a run folder.

`crasp` (a separate import name) is the language, the tasks and the predictions, in pure numpy;
`crasplab` is what tests them:

    crasplab.models      the JAX/Flax NNX transformer, the loaders of pretrained GGUF and
                         safetensors files, memory estimates (source folder models/)
    crasplab.records     the files the later layers read and write: atomic files, job and
                         run folders, the settings base
    crasplab.train       from-scratch training: data, steps, loop, job folders, the per-core
                         worker pool, the accelerator path, the engines (source folder train/)
    crasplab.incontext   pretrained models in context and fine-tuned: prompts, greedy answers,
                         alignment, fine-tuning
    crasplab.reports     the reports computed from run folders: verdicts, intervals, figures
    crasplab.compiler    C-RASP programs compiled to transformer weights (and crasplab.export)
    crasplab.cli         what the experiment scripts share: flags, the experiment runner, the
                         length-generalization run as functions

Each layer imports only from itself and the layers listed before it (and crasp), checked by
tests/test_layers.py.

Two import names only, so a `train.py` or a `models/` folder in the current directory (common in
ML projects) never shadows the lab's own modules.
"""
