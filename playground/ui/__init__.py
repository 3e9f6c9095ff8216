"""The Gradio web UI: layout.py draws the page, one module per tab holds its widgets and thin
callbacks, common.py reads the shared controls into a RunSpec, state.py is a browser session's state.

    from playground.ui import build_demo, launch_options
    build_demo().launch(**launch_options())
"""

from playground.ui.layout import build_demo, launch_options

__all__ = ["build_demo", "launch_options"]
