"""How many processes a batch command (`render`, `rerender --local`) starts by default:
the CPUs it may run on, and no more than its cgroup's CPU limit allows.

The affinity mask alone overcounts in a container: a pod limited to 2 CPUs on a
64-core node sees 64, and 64 processes sharing a 2-CPU quota only add forking,
memory and throttling. The limit is the CFS quota of the process's own cgroup
(cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded up.
"""

import math
import os

# Paths as strings: pathlib is more than `--help` should import.
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


def usable_cores(proc_cgroup: str = PROC_CGROUP, cgroup_root: str = CGROUP_ROOT) -> int:
    """The default number of render processes (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(proc_cgroup, cgroup_root)
    return max(1, min(cores, limit)) if limit is not None else max(1, cores)


def cgroup_cpu_limit(proc_cgroup: str = PROC_CGROUP, cgroup_root: str = CGROUP_ROOT) -> int | None:
    """The CPUs this process's cgroup may use, rounded up; None when it has no limit or
    none can be read (not Linux, no cgroup file system mounted)."""
    membership = _read(proc_cgroup)
    if membership is None:
        return None
    for line in membership.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        relative = path.lstrip("/")
        if hierarchy == "0" and not controllers:
            own = os.path.join(cgroup_root, relative)
            quota = _read(os.path.join(own, "cpu.max"), os.path.join(cgroup_root, "cpu.max"))
            if quota is not None:
                limit = quota.split()
                if len(limit) == 2 and limit[0] != "max":
                    return _cpus(limit[0], limit[1])
        elif "cpu" in controllers.split(","):
            top = os.path.join(cgroup_root, controllers)
            own = os.path.join(top, relative)
            quota = _read(*(os.path.join(d, "cpu.cfs_quota_us") for d in (own, top)))
            period = _read(*(os.path.join(d, "cpu.cfs_period_us") for d in (own, top)))
            if quota is not None and period is not None and not quota.startswith("-"):
                return _cpus(quota, period)
    return None


def _read(*candidates: str) -> str | None:
    """The first of `candidates` that can be read: the cgroup's own file, else the one at
    the root (inside a container's cgroup namespace the path is "/" already, and where it
    is not, the host path may not be mounted)."""
    for candidate in candidates:
        try:
            with open(candidate) as handle:
                return handle.read().strip()
        except OSError:
            continue
    return None


def _cpus(quota: str, period: str) -> int | None:
    try:
        value, base = int(quota), int(period)
    except ValueError:
        return None
    return max(1, math.ceil(value / base)) if value > 0 and base > 0 else None
