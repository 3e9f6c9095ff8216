"""Gradio's cache keeps no stray files, and every upload size gets the app's own message (issue 44).

- Zero-byte tmp* files stayed in Gradio's cache past the upload expiry: Gradio's UploadButton made one for every
  upload event (uploads.no_stray_file), and its upload route leaves a part's temporary file when the body ends
  before the part does or the part is not named "files"; the reaper removes any left (uploads.remove_leftovers).

On a real Blocks behind a test client, and the real app (build_demo) where its upload event is the subject."""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr
import pytest
from starlette.testclient import TestClient
from test_sessions import ALICE, as_page, open_upload

from playground.ui import build_demo, launch_options, sessions, uploads

TRACE = (Path(__file__).resolve().parents[2] / "assets" / "runs" / "story.json").read_bytes()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Gradio's cache (GRADIO_TEMP_DIR) in a test folder."""
    folder = tmp_path / "gradio-cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder


def loose_files(cache: Path) -> list[str]:
    """The files in the cache's top folder (uploads and downloads live in folders inside it)."""
    return sorted(p.name for p in cache.iterdir() if not p.is_dir()) if cache.is_dir() else []


def the_app(runner) -> tuple[gr.Blocks, object]:
    demo = build_demo(runner)
    demo.max_file_size = gr.utils._parse_file_size(launch_options()["max_file_size"])  # as launch() sets it
    return demo, gr.routes.App.create_app(demo, app_kwargs=dict(launch_options()["app_kwargs"], lifespan=None))


def test_opening_uploaded_traces_leaves_no_file_in_gradios_cache(tiny_catalog, runner, cache):
    """Each 'Open a trace JSON' left an empty tmp* file in the cache's top folder, never removed (48 after the
    probes). Now three opened traces leave nothing: each upload is removed once used, and no empty file is made."""
    demo, app = the_app(runner)
    with TestClient(app) as client:
        client.get("/gradio_api/startup-events")
        for i in range(3):
            as_page(client, ALICE)
            path = client.post("/gradio_api/upload", files={"files": ("run.json", TRACE + b" " * i)}).json()[0]
            assert "Recorded run (the file" in open_upload(client, demo, path, ALICE)
    assert loose_files(cache) == []
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_the_reaper_removes_gradios_temporary_files_left_in_its_cache(cache):
    """Whatever leaves one (an older run of the app, an upload cut short), the reaper's clean_files removes
    Gradio's temporary files from the cache's top folder once LEFTOVER_S old, and nothing else."""
    with gr.Blocks() as demo:
        gr.Textbox()
    cache.mkdir(parents=True)
    (cache / "tmpa1b2c3d_").write_bytes(b"")
    (cache / "tmpzz99yy88").write_bytes(b"part of an upload")
    kept = [cache / "tmpabcdefgh.mp4", cache / "notes.txt", cache / "hash1" / "tmpabcdefgh"]  # not Gradio's leftovers
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    now = time.time()
    sessions.clean_files(demo, now)
    assert len(loose_files(cache)) == 4  # fresh: an upload's parse may be writing it
    sessions.clean_files(demo, now + uploads.LEFTOVER_S + 1)
    assert loose_files(cache) == ["notes.txt", "tmpabcdefgh.mp4"] and all(p.exists() for p in kept)
