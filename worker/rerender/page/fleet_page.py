"""The fleet page (`prompt-worker report --from-archive`): one self-contained HTML file.

Built like the drift page (drift_page.py: the same slots, content security policy and
script-safe JSON) from `fleet.html`, `fleet.css` and `fleet.js`, with the data the
archive's records gave (fleet_data.py).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.rerender.page.drift_page import assemble, write_whole

_ASSETS = ("fleet.html", "fleet.css", "fleet.js")


@dataclass(frozen=True, slots=True)
class FleetPageSummary:
    path: str
    size_bytes: int
    records: int
    sessions: int


def write_fleet_page(data: dict[str, Any], html_path: str | Path) -> FleetPageSummary:
    """Write the page of `data` (`FleetData.page_data()`); raises PageError."""
    archive = data["archive"]
    title = f"Fleet: {archive['stream']} since {archive['window']['since']}"
    content = assemble(_ASSETS, "report", title, data)
    target = Path(html_path)
    write_whole(target, content)
    return FleetPageSummary(
        path=str(target),
        size_bytes=len(content),
        records=data["totals"]["records"],
        sessions=data["totals"]["sessions"],
    )
