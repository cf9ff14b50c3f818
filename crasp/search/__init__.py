"""Search for C-RASP programs: `python -m crasp search TASK`.

Bottom-up enumeration of typed C-RASP expressions by increasing size (crasp.search.grammar),
each evaluated once on a fixed sample of task strings and kept only if its values there are new
(crasp.search.enumerate). Booleans over the output index s are tested as outputs O[s] against the
task's next tokens on the sample, also inside a few fixed contexts and as parts of decision lists
(crasp.search.targets); anything right on the whole sample is verified by crasp.check before it
is reported, and a counterexample joins the sample (crasp.search.driver). A search that ends
without a program shows that none exists up to the size it completed, relative to its grammar
(crasp.search.report). Outcomes recorded with --record feed crasp.prediction (crasp.search.results).

    from crasp.search import Grammar, SearchOptions, search
    outcome = search(get_task("UR"), Grammar("local"), SearchOptions(max_size=9))
    print(outcome.discovery.text)
"""

from crasp.search.driver import Discovery, SearchOutcome, search
from crasp.search.grammar import Grammar
from crasp.search.options import SampleOptions, SearchError, SearchOptions

__all__ = ["Discovery", "Grammar", "SampleOptions", "SearchError", "SearchOptions", "SearchOutcome", "search"]
