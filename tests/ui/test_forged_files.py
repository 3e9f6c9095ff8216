"""A forged file value (a path no user uploaded) gets the same answer from every endpoint (issue 55.5)."""

from __future__ import annotations

import gradio as gr
from starlette.testclient import TestClient

from playground.ui import build_demo, launch_options

FORGED = {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}
REFUSAL = "was not uploaded by a user"  # Gradio's own message, which a decoding endpoint's admission check answers


def test_every_endpoint_answers_a_forged_file_value_as_the_decoding_endpoints_do(tiny_catalog, runner):
    """A raw POST /gradio_api/call/<api> with /etc/passwd as a file value in any input: Theory, Export and the
    settings link answered HTTP 200, then a bare {"error": null}; the decoding endpoints HTTP 400 with Gradio's
    message. Now every endpoint answers that 400 before the job queues, except the Run tab's upload event, which
    answers with its tab's own message (test_sessions); a call without a file value still joins the queue."""
    demo = build_demo(runner)
    demo.has_launched = True  # Gradio checks paths only in a launched app, as `python app.py` is
    app = gr.routes.App.create_app(demo, app_kwargs=dict(launch_options()["app_kwargs"], lifespan=None))
    events = {f.api_name: f for f in demo.fns.values() if f.api_name and not getattr(f.fn, "takes_upload", False)}
    assert {"theory", "export", "settings_link", "generate", "compare", "sweep"} <= set(events)
    with TestClient(app) as client:
        client.get("/gradio_api/startup-events")  # starts Gradio's queue
        for name, fn in events.items():
            n = max(len(fn.inputs), 1)
            for at in {0, n - 1}:
                data = [FORGED if i == at else None for i in range(n)]
                answer = client.post(f"/gradio_api/call/{name}", json={"data": data})
                assert answer.status_code == 400 and REFUSAL in answer.text, (name, at, answer.status_code, answer.text)
        plain = client.post("/gradio_api/call/theory", json={"data": [None] * len(events["theory"].inputs)})
        assert plain.status_code == 200 and "event_id" in plain.json(), plain.text


def test_a_prompt_that_is_not_text_is_refused_naming_it(tiny_catalog, runner):
    """Gradio's Textbox made text of a list, a dict or a number sent as the prompt through the API, and it ran
    (issue 55): now the value reaches the spec's check as sent, and the run is refused with a message naming it."""
    demo = build_demo(runner)
    app = gr.routes.App.create_app(demo, app_kwargs=dict(launch_options()["app_kwargs"], lifespan=None))
    fn = next(f for f in demo.fns.values() if f.api_name == "generate")
    at = next(i for i, b in enumerate(fn.inputs) if getattr(b, "elem_id", None) == "prompt")
    defaults = [None if isinstance(b, gr.State) else b.value for b in fn.inputs]
    with TestClient(app) as client:
        client.get("/gradio_api/startup-events")
        for prompt in (["Once", "upon"], {"text": "Once upon a time"}, 42, 0.5, "Once upon a time"):
            data = [prompt if i == at else v for i, v in enumerate(defaults)]
            joined = client.post("/gradio_api/call/generate", json={"data": data})
            assert joined.status_code == 200, joined.text
            stream = client.get(f"/gradio_api/call/generate/{joined.json()['event_id']}").text
            refused = "The prompt must be text" in stream
            assert refused == (not isinstance(prompt, str)), (prompt, stream[-800:])
