"""Bad input to `rerender --from-archive` and `report --from-archive` (SPEC §12): one
clear line, exit 2 for a usage error, no traceback; an unreadable record is counted and
the run goes on; a record of a newer schema stops the run with what was read kept."""

import asyncio
import uuid
from pathlib import Path

import aiormq
import orjson
import pytest

from tests.archive.streams import archive_stream, publish, record_of
from tests.cli import prompt_worker
from tests.commands.test_error_lines import one_line
from tests.integration.helpers import free_port
from tests.rerender.files import CONFIG
from tests.rerender.runs import conformance_cases
from tests.unavailable import AMQP_URL
from worker.transport.link.broker_failures import broker_address


def rerender(out: Path, *args: str) -> tuple[int, str, str]:
    result = prompt_worker(
        "rerender", "--out", str(out), "--config", CONFIG, "--progress", "off", *args
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.mark.parametrize("since", ["yesterday", "7x", "2026-11-28", "2026-11-28T09:00:00"])
def test_a_malformed_since_is_one_line(tmp_path: Path, since: str) -> None:
    result = prompt_worker(
        "rerender", "--from-archive", AMQP_URL, "--since", since, "--out", str(tmp_path / "o")
    )
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker rerender: --since/--until: {since!r} is not a time: give RFC 3339"
        " with an offset (2026-11-28T09:00:00Z) or an age (7d, 12h, 30m)"
    )


def test_from_archive_without_since_is_one_line(tmp_path: Path) -> None:
    result = prompt_worker("report", "--from-archive", AMQP_URL, "--html", str(tmp_path / "p"))
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        "prompt-worker report: --from-archive needs --since (RFC 3339, or 7d, 12h, 30m)"
    )


def test_an_unreachable_broker_is_one_line(tmp_path: Path) -> None:
    port = free_port()
    result = prompt_worker(
        "rerender", "--from-archive", f"amqp://guest:guest@127.0.0.1:{port}/",
        "--since", "1d", "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker rerender: cannot reach the broker at 127.0.0.1:{port}: connection refused"
    )


def test_a_list_of_unreachable_brokers_names_each_in_one_line(tmp_path: Path) -> None:
    first, second = free_port(), free_port()
    addresses = f"amqp://guest:guest@127.0.0.1:{first}/,amqp://guest:guest@127.0.0.1:{second}/"
    result = prompt_worker(
        "report", "--from-archive", addresses, "--since", "1d", "--html", str(tmp_path / "p")
    )
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker report: cannot reach the broker at 127.0.0.1:{first}, "
        f"127.0.0.1:{second}: connection refused"
    )


@pytest.mark.broker
@pytest.mark.parametrize("command", ["rerender", "report"])
def test_a_stream_that_is_not_there_is_one_line(tmp_path: Path, command: str) -> None:
    target = ("--out", str(tmp_path / "o")) if command == "rerender" else ("--html", "p.html")
    result = prompt_worker(
        command, "--from-archive", AMQP_URL, "--archive-stream", "archive-read.absent",
        "--since", "1d", *target,
    )  # fmt: skip
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker {command}: no stream 'archive-read.absent' on the broker (404)"
        f" (broker {broker_address(AMQP_URL)})"
    )


async def _classic_queue(name: str, *, delete: bool = False) -> int:
    connection = await aiormq.connect(AMQP_URL)
    channel = await connection.channel()
    if delete:
        declared = await channel.queue_declare(name, passive=True)
        await channel.queue_delete(name)
    else:
        await channel.queue_declare(name, auto_delete=False)
        await channel.basic_publish(b"a job", routing_key=name)
        declared = await channel.queue_declare(name, passive=True)
    await connection.close()
    return int(declared.message_count or 0)


@pytest.mark.broker
def test_a_queue_that_is_not_a_stream_is_one_line_and_keeps_its_messages(
    tmp_path: Path,
) -> None:
    name = f"archive-read.classic.{uuid.uuid4().hex[:8]}"
    assert asyncio.run(_classic_queue(name)) == 1
    try:
        code, _, err = rerender(
            tmp_path / "o.jsonl", "--from-archive", AMQP_URL, "--archive-stream", name,
            "--since", "1h",
        )  # fmt: skip
    finally:
        left = asyncio.run(_classic_queue(name, delete=True))
    assert code == 2
    assert one_line(err.encode()) == (
        f"prompt-worker rerender: {name!r} is a queue, not a stream"
        f" (broker {broker_address(AMQP_URL)})"
    )
    assert left == 1


@pytest.mark.broker
def test_an_unreadable_record_is_counted_and_the_run_goes_on(tmp_path: Path) -> None:
    cases = conformance_cases()[:3]
    with archive_stream("bad") as stream:
        asyncio.run(publish(stream, [record_of(cases[0]), b"{not json", record_of(cases[1])]))
        asyncio.run(publish(stream, [b"\x28\xb5\x2f\xfd garbage"], compress=False))
        asyncio.run(publish(stream, [record_of(cases[2])], encoding="gzip"))
        asyncio.run(publish(stream, [record_of(cases[2]) | {"job_id": "plain"}], encoding=""))
        code, out, err = rerender(
            tmp_path / "o.jsonl", "--from-archive", AMQP_URL, "--archive-stream", stream,
            "--since", "1h", "--report", str(tmp_path / "r.json"),
        )  # fmt: skip
    assert code == 0, err
    assert err.splitlines() == [
        "2 archive records could not be read (listed by offset: the rerender report's"
        " archive.bad_records, the fleet page's notes)"
    ]
    report = orjson.loads((tmp_path / "r.json").read_bytes())
    assert report["totals"]["drift"] == {"same": 4, "changed": 0, "error": 0}
    bad = report["archive"]["bad_records"]
    assert [b["offset"] for b in bad] == [1, 3]
    assert bad[0]["reason"].startswith("not JSON")
    assert bad[1]["reason"].startswith("not zstd")
    assert "2 unreadable" in out


@pytest.mark.broker
def test_a_record_of_a_newer_schema_stops_the_run_and_loses_nothing(tmp_path: Path) -> None:
    cases = conformance_cases()[:3]
    newer = record_of(cases[1]) | {"record": 2}
    with archive_stream("newer") as stream:
        asyncio.run(publish(stream, [record_of(cases[0]), newer, record_of(cases[2])]))
        code, _, err = rerender(
            tmp_path / "o.jsonl", "--from-archive", AMQP_URL, "--archive-stream", stream,
            "--since", "1h",
        )  # fmt: skip
    assert code == 2
    assert one_line(err.encode()) == (
        "prompt-worker rerender: offset 1: a record of schema 2, newer than this worker"
        " reads (1): upgrade the worker and resume; what was read is kept: --resume continues"
    )
    # What came before it is spooled; the read's state resumes at the newer record.
    spooled = (tmp_path / "o.jsonl.archive.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line)["archive"]["offset"] for line in spooled] == [0]
    state = orjson.loads((tmp_path / "o.jsonl.archive.json").read_bytes())
    assert state["complete"] is False
    assert state["last_offset"] == 0
    assert state["end_offset"] == 2
