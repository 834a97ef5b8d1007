"""The default number of render processes: the CPUs a process may run on, capped by its
cgroup's CPU limit, read from cgroup files laid out as the kernel lays them out."""

import os
from pathlib import Path

import pytest

from worker.commands.cores import cgroup_cpu_limit, usable_cores

V2_CONTAINER = "0::/\n"
V2_HOST = "0::/system.slice/render.service\n"
V1 = "12:pids:/\n4:cpu,cpuacct:/batch\n3:cpuset:/\n"


def cgroups(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(membership)
    root = tmp_path / "sys-fs-cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return str(proc), str(root)


@pytest.mark.parametrize(
    ("membership", "files", "limit"),
    [
        (V2_CONTAINER, {"cpu.max": "200000 100000"}, 2),
        (V2_CONTAINER, {"cpu.max": "150000 100000"}, 2),  # 1.5 CPUs: rounded up
        (V2_CONTAINER, {"cpu.max": "50000 100000"}, 1),
        (V2_CONTAINER, {"cpu.max": "max 100000"}, None),
        (V2_HOST, {"system.slice/render.service/cpu.max": "300000 100000"}, 3),
        # The host path is not mounted in the container: its own root file counts.
        (V2_HOST, {"cpu.max": "100000 100000"}, 1),
        (V1, {"cpu,cpuacct/batch/cpu.cfs_quota_us": "400000",
              "cpu,cpuacct/batch/cpu.cfs_period_us": "100000"}, 4),
        (V1, {"cpu,cpuacct/batch/cpu.cfs_quota_us": "-1",
              "cpu,cpuacct/batch/cpu.cfs_period_us": "100000"}, None),
        (V2_CONTAINER, {}, None),  # nothing mounted
        ("not a cgroup line\n" + V2_CONTAINER, {"cpu.max": "100000 100000"}, 1),
    ],
)  # fmt: skip
def test_the_cgroup_limit_is_read_in_whole_cpus(
    tmp_path: Path, membership: str, files: dict[str, str], limit: int | None
) -> None:
    assert cgroup_cpu_limit(*cgroups(tmp_path, membership, files)) == limit


def test_the_default_is_the_affinity_capped_by_the_limit(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    unlimited = cgroups(tmp_path / "a", V2_CONTAINER, {"cpu.max": "max 100000"})
    assert usable_cores(*unlimited) == affinity
    one = cgroups(tmp_path / "b", V2_CONTAINER, {"cpu.max": "100000 100000"})
    assert usable_cores(*one) == 1
    many = cgroups(tmp_path / "c", V2_CONTAINER, {"cpu.max": f"{affinity + 8}00000 100000"})
    assert usable_cores(*many) == affinity
    assert usable_cores(str(tmp_path / "no-such-file"), str(tmp_path)) == affinity
