"""What the experiment scripts share: the shared flags and argument types that refuse bad values
while the flags are parsed (arguments, engine_flags), the skeleton that runs an experiment from its
settings into a locked run folder and reports on it (experiment), and the experiments that are more
than one call, as functions with typed arguments (length_gen, sweep)."""
