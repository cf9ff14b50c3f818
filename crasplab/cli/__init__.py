"""What the experiment scripts share on their command lines: argument types that refuse bad values
while the flags are parsed (before a run folder is written that the corrected command would
refuse), and a help formatter that keeps a script's docstring as written."""
