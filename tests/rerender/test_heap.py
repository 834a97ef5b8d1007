"""worker/heap.py: with freed memory kept, building and freeing chunk after chunk of
records costs no new pages; with glibc's defaults every chunk maps fresh ones."""

import subprocess
import sys

from tests.data import REPO

ROUNDS = 50
# Each round is a chunk as rerender builds one: 48 replies of 25 KB, joined, all freed.
CHURN = f"""
import resource, sys
if sys.argv[1] == "kept":
    from worker.heap import keep_freed_memory
    assert keep_freed_memory()
def chunk():
    replies = [bytes([n]) * 25_000 for n in range(48)]
    joined = b"".join(replies)
    del replies, joined
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
chunk()  # the first chunk grows the heap either way
before = faults()
for _ in range({ROUNDS}):
    chunk()
print(faults() - before)
"""


def churn_faults(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", CHURN, mode], cwd=REPO, capture_output=True, check=True
    )
    return int(result.stdout)


def test_freed_chunks_are_reused_instead_of_mapped_again() -> None:
    default, kept = churn_faults("default"), churn_faults("kept")
    # About 300 pages a chunk: the defaults return the freed top of the heap each time.
    assert default >= ROUNDS * 100, "glibc's defaults no longer hand freed chunks back"
    assert kept < ROUNDS, f"{kept} page faults in {ROUNDS} chunks with freed memory kept"
