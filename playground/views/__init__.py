"""Views: pure functions from round records, DataFrames and summaries to HTML strings and plotly
figures. A view never decodes and never imports torch, transformers or gradio (a tokenizer, when
one is needed to show token text, is passed in).

- tokens.py       the output as coloured token spans, the legend
- step.py         step-through: what one round did, position by position
- tree.py         a token-tree round: the tree, its accepted path, its rejected branches
- charts.py       the run's figures (acceptance, latency, histogram, per position)
- theory.py       the theory explorer (Leviathan's ideal and this machine's calibrated curve), V(n)
- grid.py         sweep heatmaps and the pair comparison bars
- export_code.py  a run as Hugging Face generate / vLLM code
"""
