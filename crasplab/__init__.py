"""The lab around the interpreter: everything that needs JAX, model files or a run folder.

`crasp` (a separate import name) is the language, the tasks and the predictions, in pure numpy;
`crasplab` is what tests them:

    crasplab.models      the JAX/Flax NNX transformer and the loaders of pretrained GGUF and
                         safetensors files (source folder models/)
    crasplab.train       from-scratch training and fine-tuning: data, steps, loop, job folders,
                         the per-core worker pool (source folder train/)
    crasplab.results     run folders and the reports computed from their files
    crasplab.incontext   pretrained models in context: prompts, greedy answers, alignment
    crasplab.cli         what the experiment scripts share on their command lines

Two import names only, so a `train.py` or a `models/` folder in the current directory (common in
ML projects) never shadows the lab's own modules.
"""
