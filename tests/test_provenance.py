"""A run records what decides its bits, and its report says when its jobs ran under different
machines or versions (whose numbers for the same seed need not be equal)."""

from crasplab.results.length_gen import environments, environments_markdown
from crasplab.train.provenance import bits_key, cpu_description, provenance

CPUINFO = """processor\t: 0
model name\t: Example CPU @ 2.00GHz
flags\t\t: sse2 avx2 fma avx512f

processor\t: 1
model name\t: Another CPU
flags\t\t: sse2
"""


def test_the_first_processors_model_and_flags_are_read():
    cpu = cpu_description(CPUINFO)
    assert cpu["model"] == "Example CPU @ 2.00GHz"
    assert cpu["flags"] == ["avx2", "avx512f", "fma", "sse2"]
    assert cpu_description(CPUINFO.replace("fma ", ""))["flags_sha256"] != cpu["flags_sha256"]


def test_jobs_are_grouped_by_what_decides_their_bits():
    here = provenance()
    other_cpu = dict(here, cpu=cpu_description(CPUINFO))
    records = [
        dict(here, kind="provenance", task="UL", seed=0, from_step=0),
        dict(here, kind="provenance", task="UR", seed=0, from_step=0),
        dict(other_cpu, kind="provenance", task="UR", seed=0, from_step=500),  # resumed elsewhere
        dict(kind="eval", task="UL", seed=0, step=500, bins=[]),
    ]
    groups = environments(records)
    assert bits_key(here) != bits_key(other_cpu)
    assert [group["jobs"] for group in groups] == [[("UL", 0), ("UR", 0)], [("UR", 0)]]
    assert "2 environments" in environments_markdown(groups)
    assert "unknown" in environments_markdown([])
