"""`prompt-worker render` and `prompt-worker schema`, run as a user runs them."""

import json
from pathlib import Path
from typing import Any

import pytest

from schemas.json_schema import SCHEMA_FILES, render_schema
from tests.cli import prompt_worker
from tests.data import BENCH_JOBS, CONFORMANCE, REPO, SEED_000_KINDS, read_jsonl


def replies(stdout: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.decode().splitlines()]


def test_renders_a_pretty_printed_job_file() -> None:
    result = prompt_worker(
        "render",
        str(BENCH_JOBS / "typical_react_job.json"),
        "--config",
        str(BENCH_JOBS / "worker.yaml"),
    )
    assert result.returncode == 0, result.stderr
    (reply,) = replies(result.stdout)
    assert reply["status"] == "ok"
    assert (
        reply["job_id"] == json.loads((BENCH_JOBS / "typical_react_job.json").read_text())["job_id"]
    )
    assert "## kubernetes-server Instructions" in reply["messages"][0]["content"]


def test_json_lines_from_stdin_in_order_with_a_bad_line() -> None:
    cases = list(read_jsonl(CONFORMANCE / "cases.jsonl"))[:5]
    lines = [json.dumps(c["job"]) for c in cases]
    lines.insert(2, '{"job_id": "broken", "kind": ')
    lines.insert(4, "")
    stdin = ("\n".join(lines) + "\n").encode()
    result = prompt_worker("render", "-", "--config", str(CONFORMANCE / "worker.yaml"), stdin=stdin)
    assert result.returncode == 1
    # Line N of the output answers line N of the input: the blank line 5 is an empty line.
    lines = result.stdout.decode().splitlines()
    assert lines[4] == ""
    out = replies(result.stdout.replace(b"\n\n", b"\n"))
    assert [r["status"] for r in out] == ["ok", "ok", "error", "ok", "ok", "ok"]
    assert out[2]["error"]["code"] == "invalid_json"
    assert out[2]["error"]["line"] == 3
    ok = [r for r in out if r["status"] == "ok"]
    assert [r["job_id"] for r in ok] == [c["job"]["job_id"] for c in cases]
    assert [r["messages"] for r in ok] == [c["expected_messages"] for c in cases]


def test_a_job_budget_applies_and_an_over_budget_job_exits_1() -> None:
    job = json.loads((BENCH_JOBS / "typical_react_job.json").read_text(encoding="utf-8"))
    fits = {**job, "job_id": "fits", "budget": {"max_prompt_tokens": 3000}}
    cannot = {**job, "job_id": "cannot", "budget": {"max_prompt_tokens": 10}}
    stdin = (json.dumps(fits) + "\n" + json.dumps(cannot) + "\n").encode()
    config = str(BENCH_JOBS / "worker.yaml")
    result = prompt_worker("render", "-", "--config", config, stdin=stdin)
    assert result.returncode == 1
    trimmed, refused = replies(result.stdout)
    budget = trimmed["meta"]["budget"]
    assert budget["trimmed"] and budget["prompt_tokens"] <= 3000
    assert sum(-(-len(m["content"]) // 4) for m in trimmed["messages"]) == budget["prompt_tokens"]
    assert refused["error"]["code"] == "over_budget"


@pytest.mark.parametrize("tokenizer", ["estimate", "cl100k_base", "o200k_base"])
def test_budget_option_applies_to_jobs_without_one(tokenizer: str) -> None:
    job = json.loads((BENCH_JOBS / "typical_react_job.json").read_text(encoding="utf-8"))
    own = {**job, "job_id": "own", "budget": {"max_prompt_tokens": 5000}}
    stdin = (json.dumps({**job, "job_id": "bare"}) + "\n" + json.dumps(own) + "\n").encode()
    config = str(BENCH_JOBS / "worker.yaml")
    options = ("--budget", "3000", "--tokenizer", tokenizer)
    result = prompt_worker("render", "-", "--config", config, *options, stdin=stdin)
    assert result.returncode == 0, result.stderr
    bare, kept = replies(result.stdout)
    budget = bare["meta"]["budget"]
    assert (budget["max_prompt_tokens"], budget["tokenizer"]) == (3000, tokenizer)
    assert budget["trimmed"] and budget["prompt_tokens"] <= 3000
    assert bare["meta"]["cache"]["tokenizer"] == tokenizer
    # A job's own budget is its own.
    assert (kept["meta"]["budget"]["max_prompt_tokens"], kept["meta"]["budget"]["tokenizer"]) == (
        5000,
        "estimate",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--tokenizer", "cl100k_base"), "--tokenizer needs --budget"),
        (("--policy", "tight"), "--policy needs --budget"),
        (("--budget", "100", "--policy", "loose"), "invalid choice: 'loose'"),
        (("--budget", "100", "--tokenizer", "p50k_base"), "'p50k_base' is not available"),
        (("--budget", "0"), "must be at least 1"),
    ],
)
def test_bad_budget_options_exit_2_with_a_reason(options: tuple[str, ...], message: str) -> None:
    job = json.loads((BENCH_JOBS / "typical_react_job.json").read_text(encoding="utf-8"))
    result = prompt_worker("render", "-", *options, stdin=json.dumps(job).encode())
    assert result.returncode == 2
    assert result.stdout == b""
    assert message in result.stderr.decode()
    assert "Traceback" not in result.stderr.decode()


def test_config_from_environment(tmp_path: Path) -> None:
    job = {"job_id": "j", "kind": "react", "stage": {"mcp_servers": ["kubernetes-server"]}}
    env = {"PROMPT_WORKER_CONFIG": str(CONFORMANCE / "worker.yaml"), "PATH": "/usr/bin:/bin"}
    result = prompt_worker("render", stdin=json.dumps(job).encode(), env=env)
    assert result.returncode == 0
    assert (
        "## kubernetes-server Instructions" in replies(result.stdout)[0]["messages"][0]["content"]
    )


def test_malformed_config_is_a_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "worker.yaml"
    config.write_text("mcp_servers:\n  k8s: [not, a, mapping]\n")
    result = prompt_worker("render", "--config", str(config), stdin=b"{}")
    assert result.returncode == 2
    err = result.stderr.decode()
    assert str(config) in err and "mcp_servers.k8s" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("mcp_servers: [\n", "not valid YAML"),
        ("- a list\n", "expected a mapping"),
        ("mcp_server: {}\n", "mcp_server"),
    ],
)
def test_config_problems_are_named(tmp_path: Path, text: str, problem: str) -> None:
    config = tmp_path / "worker.yaml"
    config.write_text(text)
    result = prompt_worker("render", "--config", str(config), stdin=b"{}")
    assert result.returncode == 2
    assert problem in result.stderr.decode()


# Line 4 is "  bad: x: y": the second colon, at column 9, cannot start a value there.
BROKEN_YAML = """mcp_servers:
  kubernetes-server:
    instructions: "Prefer read-only verbs."
  bad: x: y
"""


@pytest.mark.parametrize("command", ["render", "serve"])
def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(
    tmp_path: Path, command: str
) -> None:
    config = tmp_path / "worker.yaml"
    config.write_text(BROKEN_YAML)
    env = {"PATH": "/usr/bin:/bin", "PROMPT_WORKER_HTTP_PORT": "0"}
    result = prompt_worker(command, "--config", str(config), stdin=b"{}", env=env)
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert f"{config}:4:9: not valid YAML: mapping values are not allowed here" in line


@pytest.mark.parametrize("command", ["render", "serve"])
def test_a_misspelt_key_in_an_mcp_server_entry_is_rejected(tmp_path: Path, command: str) -> None:
    config = tmp_path / "worker.yaml"
    config.write_text("mcp_servers:\n  kubernetes-server:\n    instructons: Prefer get.\n")
    env = {"PATH": "/usr/bin:/bin", "PROMPT_WORKER_HTTP_PORT": "0"}
    result = prompt_worker(command, "--config", str(config), stdin=b"{}", env=env)
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert f"{config}: mcp_servers.kubernetes-server.instructons: unknown key" in line
    assert "did you mean 'instructions'?" in line


def test_missing_input_and_config_files() -> None:
    assert prompt_worker("render", "/nonexistent/jobs.jsonl").returncode == 2
    result = prompt_worker("render", "--config", "/nonexistent/worker.yaml")
    assert result.returncode == 2
    assert "no such file" in result.stderr.decode()


def test_usage_errors_exit_2() -> None:
    assert prompt_worker("render", "--bogus").returncode == 2
    assert prompt_worker().returncode == 2


@pytest.mark.parametrize("stdin", [b"", b"\n \n"])
def test_empty_input_is_said_and_exits_2(stdin: bytes) -> None:
    result = prompt_worker("render", stdin=stdin)
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        "prompt-worker render: no job to render: stdin is empty"
    ]


def test_an_empty_file_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "jobs.jsonl"
    empty.write_bytes(b"")
    result = prompt_worker("render", str(empty))
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode().splitlines() == [
        f"prompt-worker render: no job to render: {empty} is empty"
    ]


@pytest.mark.parametrize("which", sorted(SCHEMA_FILES))
def test_schema_command_prints_the_committed_schema(which: str) -> None:
    result = prompt_worker("schema", which)
    assert result.returncode == 0
    committed = (REPO / "schemas" / SCHEMA_FILES[which]).read_text(encoding="utf-8")
    assert result.stdout.decode() == committed


@pytest.mark.parametrize("which", sorted(SCHEMA_FILES))
def test_committed_json_schemas_are_not_stale(which: str) -> None:
    committed = (REPO / "schemas" / SCHEMA_FILES[which]).read_text(encoding="utf-8")
    assert committed == render_schema(which), (
        f"schemas/{SCHEMA_FILES[which]} is stale: run `prompt-worker schema --write schemas`"
    )


def test_job_schema_describes_the_contract() -> None:
    schema = json.loads(render_schema("job"))
    assert set(schema["required"]) == {"job_id", "kind"}
    kinds = schema["$defs"]["Kind"]["enum"]
    assert set(kinds) >= SEED_000_KINDS


def test_an_error_reply_names_the_input_line_not_the_jsons() -> None:
    good = json.dumps({"job_id": "good", "kind": "react"})
    stdin = f'{good}\n{{"job_id": "bad", "kind": }}\n{good}\n'.encode()
    result = prompt_worker("render", "-", stdin=stdin)
    assert result.returncode == 1
    first, bad, last = replies(result.stdout)
    assert (first["status"], last["status"]) == ("ok", "ok")
    assert bad["error"]["line"] == 2
    assert bad["error"]["message"] == (
        "body is not valid JSON: unexpected '}', expected a JSON value (line 2, column 27)"
    )


def test_concatenated_pretty_printed_jobs_get_one_reply_each_at_their_line() -> None:
    jobs = [
        {"job_id": "one", "kind": "react"},
        {"job_id": "two", "kind": "no-such-kind"},
        {"job_id": "three", "kind": "react"},
    ]
    stdin = "\n".join(json.dumps(job, indent=2) for job in jobs).encode()
    result = prompt_worker("render", "-", stdin=stdin)
    assert result.returncode == 1
    one, two, three = replies(result.stdout)
    assert [r["job_id"] for r in (one, two, three)] == ["one", "two", "three"]
    assert (one["status"], three["status"]) == ("ok", "ok")
    assert (two["error"]["code"], two["error"]["line"]) == ("invalid_job", 5)


def test_a_broken_job_among_pretty_printed_ones_says_where_it_goes_wrong() -> None:
    good = json.dumps({"job_id": "good", "kind": "react"}, indent=2)
    stdin = f'{good}\n{{\n  "job_id": "bad",\n  "kind" "react"\n}}\n'.encode()
    result = prompt_worker("render", "-", stdin=stdin)
    assert result.returncode == 1
    ok, bad = replies(result.stdout)
    assert ok["status"] == "ok"
    assert bad["error"]["line"] == 5  # where the broken job starts
    assert bad["error"]["message"].endswith("(line 7, column 10)")  # where it breaks


def test_a_json_array_of_jobs_gets_a_hint() -> None:
    stdin = json.dumps([{"job_id": "a", "kind": "react"}, {"job_id": "b", "kind": "react"}])
    result = prompt_worker("render", "-", stdin=stdin.encode())
    assert result.returncode == 1
    (reply,) = replies(result.stdout)
    (detail,) = reply["error"]["details"]
    assert detail["message"] == (
        "a job is a JSON object, and this is an array: send each job on its own "
        "(for `prompt-worker render` and `rerender`, one job a line: JSON Lines)"
    )


def test_a_misspelt_member_inside_the_stage_is_warned_of() -> None:
    job = {"job_id": "j", "kind": "react", "stage": {"agent_nme": "KubernetesAgent"}}
    result = prompt_worker("render", "-", stdin=json.dumps(job).encode())
    assert result.returncode == 0, result.stderr
    (reply,) = replies(result.stdout)
    assert reply["meta"]["warnings"] == [
        "unknown member 'stage.agent_nme' of the job is ignored; did you mean 'stage.agent_name'?"
    ]


def test_policy_option_is_the_policy_of_the_budget_option() -> None:
    job = json.loads((BENCH_JOBS / "typical_react_job.json").read_text(encoding="utf-8"))
    tight = {**job, "job_id": "tight", "budget": {"max_prompt_tokens": 3000, "policy": "tight"}}
    cache = {**job, "job_id": "cache", "budget": {"max_prompt_tokens": 3000}}
    stdin = "\n".join(json.dumps(j) for j in ({**job, "job_id": "bare"}, tight, cache)).encode()
    config = str(BENCH_JOBS / "worker.yaml")
    options = ("--budget", "3000", "--policy", "tight")
    result = prompt_worker("render", "-", "--config", config, *options, stdin=stdin)
    assert result.returncode == 0, result.stderr
    bare, own_tight, own_cache = replies(result.stdout)
    assert bare["meta"]["budget"]["trimmed"]
    assert bare["messages"] == own_tight["messages"] != own_cache["messages"]
