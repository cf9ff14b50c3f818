"""What the experiment scripts share: the shared flags and argument types that refuse bad values
while the flags are parsed (arguments), and the skeleton that runs an experiment from its settings
into a locked run folder and reports on it (experiment)."""
