"""Speculative Decoding Playground: python app.py (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT)."""
from __future__ import annotations

import os

from playground.ui import build_demo, launch_options

demo = build_demo()

if __name__ == "__main__":
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        **launch_options(),  # the theme, the CSS, and max_file_size (the app takes no upload)
    )
