"""Every HTTP route of the real app (python app.py on the tiny pairs) that runs an event goes through the one device
queue and its caps (issue 35.4). Gradio 6 opens direct routes outside Spaces, POST /gradio_api/run/<api> and
/gradio_api/api/<api>, which ran an event at once, outside the queue (ten /run/generate from one address all
started together; four /run/compare ran side by side): they are refused for every queued event, and
/gradio_api/call/<api> joins the queue."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from test_load import args

DECODING = {"generate", "step_start", "step_next", "sweep", "compare", "challenge"}  # the events that run a model
# The events Gradio runs without the queue (queue=False), none of which runs a model: an example's text into the
# prompt box, the start-up line's timer, the Stop buttons' cancels, the projector's JavaScript.
UNQUEUED = {"load_example", "lambda", "js_fn", "js_fn_1", "unnamed", "unnamed_1", "unnamed_2", "unnamed_3", "unnamed_4"}


def post(url: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_no_direct_route_runs_an_event_outside_the_queue(app_server):
    with urllib.request.urlopen(app_server + "config", timeout=30) as response:
        events = json.loads(response.read())["dependencies"]
    assert DECODING <= {e["api_name"] for e in events}
    answers = {}
    for event in events:
        data = args(max_new=8) + [None] if event["api_name"] == "generate" else [None] * len(event["inputs"])
        for route in ("run", "api"):  # by name, and by fn_index (which names any event, even an undocumented one)
            answers[route, event["api_name"]] = post(
                f"{app_server}gradio_api/{route}/{event['api_name']}", {"data": data, "fn_index": event["id"]}
            )
    ran = {
        key: answer
        for key, answer in answers.items()
        if key[1] not in UNQUEUED and not (answer[0] == 404 and "join the queue" in answer[1])
    }
    assert ran == {}, f"direct routes that ran an event outside the queue: {ran}"
    unqueued = {e["api_name"] for e in events if not e["queue"]}
    assert unqueued <= UNQUEUED and not unqueued & DECODING


def test_every_decoding_event_joins_the_queue_through_its_call_route(app_server):
    for name in sorted(DECODING):
        data = args(max_new=8) + [None] if name == "generate" else None
        if data is None:  # its inputs as the API lists them; None each: the callback answers with a message
            with urllib.request.urlopen(app_server + "config", timeout=30) as response:
                event = next(e for e in json.loads(response.read())["dependencies"] if e["api_name"] == name)
            data = [None] * len(event["inputs"])
        status, text = post(f"{app_server}gradio_api/call/{name}", {"data": data})
        assert status == 200 and json.loads(text)["event_id"], (name, status, text)  # queued: an event to read
        with urllib.request.urlopen(
            f"{app_server}gradio_api/call/{name}/{json.loads(text)['event_id']}", timeout=120
        ) as response:
            stream = response.read().decode()
        assert "event: complete" in stream or "event: error" in stream, (name, stream[-500:])
