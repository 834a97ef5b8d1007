"""Jobs for the budget tests: sessions of known size, rendered through the renderer."""

from typing import Any

import orjson

from worker.render.renderer import Renderer


def event(number: int, words: int = 60, event_type: str = "tool_result") -> dict[str, str]:
    return {"event_type": event_type, "content": f"event {number}: " + "kubectl pod " * words}


def investigation(events: int, **budget: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_id": "budget-investigation",
        "kind": "react",
        "session": {
            "alert_type": "PodCrashLooping",
            "alert_data": "namespace: prod\npod: api-7f9\n" + "restart " * 40,
            "runbook_content": "# Runbook\n" + "check the logs " * 40,
        },
        "stage": {
            "custom_instructions": "Never restart the database.",
            "previous_stage_events": [event(n) for n in range(events)],
        },
        "tools": [{"name": "k8s.get_pods", "description": "List pods."}],
    }
    if budget:
        job["budget"] = budget
    return job


def chat(exchanges: int, events: int, **budget: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_id": "budget-chat",
        "kind": "react",
        "chat": {
            "user_question": "Why did the api pod restart?",
            "investigation_events": [event(n) for n in range(events)],
            "history": [
                {
                    "user_question": f"question {n}",
                    "messages": [
                        {"role": "assistant", "content": f"answer {n}: " + "it was OOM " * 50}
                    ],
                }
                for n in range(exchanges)
            ],
        },
    }
    if budget:
        job["budget"] = budget
    return job


def render(renderer: Renderer, job: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = orjson.loads(renderer.render(orjson.dumps(job)).body)
    return reply


def without_budget(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k != "budget"}


def estimate(messages: list[dict[str, str]]) -> int:
    return sum(-(-len(m["content"]) // 4) for m in messages)
